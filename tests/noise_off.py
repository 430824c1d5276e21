"""An engine with its noise switched off, for helpers.py and for the light modules that child
interpreters import (product_case.py, test_ddp.py's workers). Imports only pyfastpim: a child must not
pay for helpers' imports (hypothesis, the OpenCL device enumeration)."""
import pyfastpim

# an engine's noise switched off: write / read variation, DAC noise and stuck cells (DPETensor(**NOISE_OFF))
NOISE_OFF = dict(write_variation=0.0, read_variation=0.0, vnoise=0.0, rate_stuck_HGS=0.0, rate_stuck_LGS=0.0)


def noise_free_engine(**kw):
    """DPETensor(**NOISE_OFF) with the other settings kw."""
    return pyfastpim.DPETensor(**dict(NOISE_OFF, **kw))
