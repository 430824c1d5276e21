"""Slow NumPy transcriptions of the device physics (docs/physics.md).

- ``irdrop_currents``: the resistive crossbar network solved densely by nodal analysis
  (an independent formulation: explicit node list, conductance stamps, Dirichlet nodes
  eliminated), returning column currents for given row voltages; cells below 0 S are open.
- ``philox4x32_10`` / ``pf_uniforms`` / ``pf_normal`` (float32, as the engine) / ``pf_normal64``:
  Philox4x32-10, the engine's uniforms and its Box-Muller normals; the engine's stream numbers.
- ``drift``: G(t) = G(t0) (t / t0)^(-nu), per-cell nu = max(0, nu_mean + nu_std z) (log t - log t0 where
  t / t0 overflows; G unchanged where nu = 0 or t = t0).
"""
import numpy as np


def irdrop_currents(G, V, r_wire):
    """Column currents (A) of block G (n, m) siemens under row voltages V (n,) or (k, n).

    A cell below 0 S is an open cell (docs/physics.md): the network conducts ``max(G, 0)``."""
    G = np.maximum(np.asarray(G, dtype=np.float64), 0.0)
    n, m = G.shape
    V = np.atleast_2d(np.asarray(V, dtype=np.float64))
    # unknown nodes: row nodes R[i, j], column nodes C[i, j]; fixed: driver i (V_i), ground (0)
    R = np.arange(n * m).reshape(n, m)
    C = n * m + np.arange(n * m).reshape(n, m)
    N = 2 * n * m
    gw = 1.0 / r_wire
    A = np.zeros((N, N))
    B = np.zeros((N, n))  # injection from driver i

    def stamp(a, b, g):
        A[a, a] += g
        A[b, b] += g
        A[a, b] -= g
        A[b, a] -= g

    for i in range(n):
        A[R[i, 0], R[i, 0]] += gw           # driver -- R -- first cell
        B[R[i, 0], i] += gw
        for j in range(m - 1):
            stamp(R[i, j], R[i, j + 1], gw)
    for j in range(m):
        for i in range(n - 1):
            stamp(C[i, j], C[i + 1, j], gw)
        A[C[n - 1, j], C[n - 1, j]] += gw   # last cell -- R -- virtual ground
    for i in range(n):
        for j in range(m):
            stamp(R[i, j], C[i, j], G[i, j])
    x = np.linalg.solve(A, B @ V.T)         # (N, k)
    return (x[C[n - 1, :], :] * gw).T       # (k, m)


M0, M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
W0, W1 = np.uint32(0x9E3779B9), np.uint32(0xBB67AE85)


def philox4x32_10(ctr, key):
    """ctr (..., 4) uint32, key (..., 2) uint32 -> (..., 4) uint32 (Random123's philox4x32, 10 rounds)."""
    c = [ctr[..., i].astype(np.uint64) for i in range(4)]
    k0, k1 = key[..., 0].astype(np.uint32), key[..., 1].astype(np.uint32)
    mask = np.uint64(0xFFFFFFFF)
    for r in range(10):
        if r:
            k0 = (k0 + W0).astype(np.uint32)
            k1 = (k1 + W1).astype(np.uint32)
        p0, p1 = M0 * c[0], M1 * c[2]
        hi0, lo0, hi1, lo1 = p0 >> np.uint64(32), p0 & mask, p1 >> np.uint64(32), p1 & mask
        c = [hi1 ^ c[1] ^ k0.astype(np.uint64), lo1, hi0 ^ c[3] ^ k1.astype(np.uint64), lo0]
    return np.stack([x.astype(np.uint32) for x in c], axis=-1)


# the engine's Philox streams (csrc/core): write variation, stuck-at draws (docs/semantics.md
# section 6) and drift's nu (docs/physics.md "Drift")
WRITE_STREAM, STUCK_STREAM, DRIFT_STREAM = 2, 3, 64


def pf_uniforms(seed, stream, call, idx):
    """The four float32 uniforms (0, 1) of element idx's Philox group idx // 4 (counter: group, call,
    stream; key: seed), shape (..., 4), and the element's lane idx % 4."""
    idx = np.asarray(idx, dtype=np.uint64)
    group = idx >> np.uint64(2)
    ctr = np.stack([(group & np.uint64(0xFFFFFFFF)).astype(np.uint32), (group >> np.uint64(32)).astype(np.uint32),
                    np.full(idx.shape, call, np.uint32), np.full(idx.shape, stream, np.uint32)], axis=-1)
    key = np.broadcast_to(np.array([seed & 0xFFFFFFFF, seed >> 32], dtype=np.uint32), ctr.shape[:-1] + (2,))
    w = philox4x32_10(ctr, key)
    # float32 ((w >> 8) + 0.5f) / 2**24: the + 0.5 rounds above 2**23 (u near 1)
    u = ((w >> np.uint32(8)).astype(np.float32) + np.float32(0.5)) * np.float32(1.0 / 16777216.0)
    return u, (idx & np.uint64(3)).astype(np.int64)


def pick_lane(values, lane):
    """values (..., 4) at each element's lane (...,)."""
    return np.take_along_axis(values, lane[..., None], axis=-1)[..., 0]


def pf_uniform(seed, stream, call, idx):
    """Element idx's own uniform (its lane of pf_uniforms), as float64."""
    u, lane = pf_uniforms(seed, stream, call, idx)
    return pick_lane(u, lane).astype(np.float64)


def _box_muller(u, lane, two_pi, minus_two):
    r0, r1 = np.sqrt(minus_two * np.log(u[..., 0])), np.sqrt(minus_two * np.log(u[..., 2]))
    t0, t1 = two_pi * u[..., 1], two_pi * u[..., 3]
    return pick_lane(np.stack([r0 * np.cos(t0), r0 * np.sin(t0), r1 * np.cos(t1), r1 * np.sin(t1)], axis=-1), lane)


def pf_normal(seed, stream, call, idx):
    """The engine's standard normal of element idx (array of uint64): float32 Box-Muller of its group's
    uniforms (lanes cos, sin of pair 0, then of pair 1)."""
    u, lane = pf_uniforms(seed, stream, call, idx)
    return _box_muller(u, lane, np.float32(6.283185307179586), np.float32(-2.0))


def pf_normal64(seed, stream, call, idx):
    """pf_normal's Box-Muller in float64 on the same uniforms: a reference the float32 pipeline is not."""
    u, lane = pf_uniforms(seed, stream, call, idx)
    return _box_muller(u.astype(np.float64), lane, 2 * np.pi, -2.0)


def drift(G, seed, t, t0, nu_mean, nu_std):
    """(G(t) float32, nu float64) for cells G (any shape) indexed in C order."""
    G = np.asarray(G, dtype=np.float32)
    idx = np.arange(G.size, dtype=np.uint64).reshape(G.shape)
    z = pf_normal(seed, DRIFT_STREAM, 0, idx).astype(np.float64) if nu_std > 0 else np.zeros(G.shape)
    with np.errstate(over="ignore", invalid="ignore"):
        nu = np.maximum(nu_mean + nu_std * z, 0.0)
        ratio = np.float64(t) / np.float64(t0)
        # where t / t0 overflows a double the logarithm is log t - log t0 (docs/physics.md)
        log_ratio = np.log(ratio) if np.isfinite(ratio) else np.log(np.float64(t)) - np.log(np.float64(t0))
        drifted = (G.astype(np.float64) * np.exp(-nu * log_ratio)).astype(np.float32)
    # nu = 0, and t = t0, keep G exactly (also for a nu that overflowed to inf)
    return np.where((nu == 0) | (log_ratio == 0), G, drifted), nu
