"""pytest plugin of `make tsan`: the CPU kernels run their generic (scalar) code.

TSan instruments memory accesses of at most 16 bytes; the AVX2/AVX-512 kernels' 32- and
64-byte vector loads and stores are not instrumented, so a race on them would go unseen. The
generic path runs the same parallel regions over the same buffers with scalar accesses."""
import pyfastpim


def pytest_configure(config):
    pyfastpim.set_isa_limit("generic")
