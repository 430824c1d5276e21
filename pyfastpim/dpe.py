"""The dot-product engine: MemIntelli's DPETensor on pyfastpim's fused C kernel.

``DPETensor`` keeps MemIntelli's parameters, defaults and validation errors;
``engine(x, w)`` / ``engine.MapReduceDot(x, w)`` multiply two
:class:`pyfastpim.SlicedData` (input, programmed weights) through the simulated
crossbar (spec section 7) in one C call that reads slice codes and conductance
levels and writes the final product, with device noise drawn inside the
kernel from a counter-based generator (Philox4x32-10): key = ``engine.seed``,
counter = (element, ``engine.calls``). The same seed and call number give the
same output for any thread count.
"""
import math
import numbers

import numpy as np

from . import _core

__all__ = ["DPETensor", "dpe_matmul", "DEFAULT_SEED"]

#: Seed used when none is given: weight programming (write variation, stuck-at
#: faults) and read noise are reproducible by default, as in MemIntelli.
DEFAULT_SEED = _core.DEFAULT_SEED


def _torch():
    try:
        import torch
        return torch
    except ImportError:  # pragma: no cover - torch is a Debian dependency here
        return None


def _number(value, name, minimum=None, integer=False):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError("argument '%s': expected a %s, got %r" % (name, "int" if integer else "number", value))
    if integer and not isinstance(value, numbers.Integral):
        raise TypeError("argument '%s': expected an int, got %r" % (name, value))
    if not math.isfinite(value):
        raise ValueError("argument '%s': must be finite, got %r" % (name, value))
    if minimum is not None and value < minimum:
        raise ValueError("argument '%s': must be >= %s, got %r" % (name, minimum, value))
    return int(value) if integer else float(value)


#: Slice codes of at most this many bytes are made at once by the one-call entry points.
_CHUNK_CODE_BYTES = 64 << 20


def _widths_of(slice_method):
    from .sliced import _widths
    return _widths(slice_method)


def _is_torch(obj):
    t = _torch()
    return t is not None and isinstance(obj, t.Tensor)


def _pair(value, name, minimum):
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = (value, value)
    try:
        a, b = (int(v) for v in value)
        if any(isinstance(v, bool) or not isinstance(v, numbers.Integral) for v in value):
            raise TypeError
    except (TypeError, ValueError):
        raise TypeError("argument '%s': expected an int or a pair of ints, got %r" % (name, value)) from None
    if a < minimum or b < minimum:
        raise ValueError("argument '%s': values must be >= %d, got %r" % (name, minimum, value))
    return a, b


def _resolve_granule(rows, cols, paral, quant_gran):
    """Spec section 2 for the unfolded conv input: the granule rounded up to whole blocks."""
    if quant_gran is None:
        q = paral
    elif isinstance(quant_gran, str):
        table = {"per-matrix": (rows, cols), "per-row": (1, cols), "per-col": (rows, 1)}
        if quant_gran not in table:
            raise ValueError("argument 'input_quant_gran': expected None, 'per-matrix', 'per-row', 'per-col' or a "
                             "pair of ints, got %r" % (quant_gran,))
        q = table[quant_gran]
    else:
        q = _pair(quant_gran, "input_quant_gran", 1)
    q = (max(q[0], 1), max(q[1], 1))
    return (-(-q[0] // paral[0]) * paral[0], -(-q[1] // paral[1]) * paral[1])


class DPETensor:
    """Dot-product engine simulating bit-sliced matrix products on memristor crossbars.

    Parameters (MemIntelli's, with its defaults):
        HGS, LGS: high / low conductance state in siemens (LGS < HGS).
        g_level: number of conductance levels (>= 2).
        write_variation: sigma of the multiplicative Gaussian write noise, fixed per programming.
        read_variation: sigma of the log-normal read noise, a float for all levels or a dict
            {level: sigma} with a key for every level 0 .. g_level-1; fresh every call.
        vnoise: sigma of the relative Gaussian DAC voltage noise, fresh every call.
        wire_resistance: must be 0 (> 0 raises NotImplementedError, as in MemIntelli).
        rdac: DAC resolution (>= 2 levels).
        radc: ADC resolution, an int or one per weight slice (given most significant slice first).
        vread: read voltage.
        rate_stuck_HGS, rate_stuck_LGS: probabilities of cells stuck at HGS / LGS.
        device: None, "cpu" or torch.device("cpu") (the CPU kernels), "opencl" (first GPU, else first
            OpenCL device), "cuda[:N]" / torch.device("cuda") (the best OpenCL GPU, else the CPU) or
            "opencl:P:D" (see pyfastpim.devices()): the same results on any device. On OpenCL, MVMs
            (MapReduceDot, forward_linear) and convolutions (forward_conv2d) run on the device.
        seed: engine seed (int in [0, 2**64)); None uses ``DEFAULT_SEED``. It keys the read and
            voltage noise (with the call counter) and weight programming.

    Attributes ``seed`` and ``calls`` (the call counter, part of every noise counter) are
    inspectable; :meth:`reset` rewinds them.
    """

    def __init__(self, HGS=1e-5, LGS=1e-7, g_level=16, write_variation=0.02, read_variation=0.02, vnoise=0.05,
                 wire_resistance=0, rdac=2 ** 4, radc=2 ** 8, vread=0.2, rate_stuck_HGS=0.001, rate_stuck_LGS=0.0,
                 device=None, seed=None):
        self.HGS = _number(HGS, "HGS", 0)
        self.LGS = _number(LGS, "LGS", 0)
        self.g_level = _number(g_level, "g_level", integer=True)
        self.write_variation = _number(write_variation, "write_variation", 0)
        self.vnoise = _number(vnoise, "vnoise", 0)
        self.wire_resistance = _number(wire_resistance, "wire_resistance", 0)
        self.rdac = _number(rdac, "rdac", integer=True)
        self.vread = _number(vread, "vread")
        self.rate_stuck_HGS = _number(rate_stuck_HGS, "rate_stuck_HGS", 0)
        self.rate_stuck_LGS = _number(rate_stuck_LGS, "rate_stuck_LGS", 0)
        if isinstance(radc, (list, tuple, np.ndarray)) or (_torch() and isinstance(radc, _torch().Tensor)):
            values = [_number(int(v) if float(v) == int(v) else v, "radc", integer=True) for v in list(radc)]
            if not values:
                raise ValueError("argument 'radc': an empty list")
            if any(v < 2 for v in values):
                raise ValueError('All ADC resolution values should be larger than 1!')
            self.radc = tuple(values)
            self.radc_is_list = True
        else:
            self.radc = _number(radc, "radc", integer=True)
            self.radc_is_list = False
            if self.radc < 2:
                raise ValueError('The resolution of the ADC should be larger than 1!')
        if self.rdac < 2:
            raise ValueError('The resolution of the DAC should be larger than 1!')
        if self.rdac > 2 ** 24 or max(self.radc if self.radc_is_list else (self.radc,)) > 2 ** 24:
            raise ValueError("arguments 'rdac'/'radc': converter resolutions above 2**24 levels are not supported")
        if self.g_level < 2:
            raise ValueError('The number of the conductance levels should be larger than 1!')
        if self.g_level > 256:
            raise ValueError("argument 'g_level': at most 256 levels are supported (levels are stored as uint8)")
        if self.LGS >= self.HGS:
            raise ValueError('The low conductance state should be smaller than the high conductance state!')
        if self.vread <= 0:
            raise ValueError("argument 'vread': must be > 0")
        if self.rate_stuck_HGS > 1 or self.rate_stuck_LGS > 1 or self.rate_stuck_HGS + self.rate_stuck_LGS > 1:
            raise ValueError('The sum of stuck fault rates should not exceed 1!')
        if isinstance(read_variation, dict):
            if set(read_variation.keys()) != set(range(self.g_level)):
                raise ValueError(f'read_variation dict must have keys for all g levels 0 to {self.g_level - 1}')
            self.read_variation = {int(k): _number(v, "read_variation[%d]" % k, 0) for k, v in read_variation.items()}
        elif isinstance(read_variation, numbers.Real) and not isinstance(read_variation, bool):
            sigma = _number(read_variation, "read_variation", 0)
            self.read_variation = {i: sigma for i in range(self.g_level)}
        else:
            raise ValueError('read_variation must be a dict, float, or None')
        from .devices import resolve_engine_device
        self._cl = resolve_engine_device(device)  # None: CPU; ValueError / RuntimeError naming the device
        self.device = "cpu" if self._cl is None else (device if isinstance(device, str) else "opencl")
        self.Q_G = (self.HGS - self.LGS) / (self.g_level - 1)
        self.conductance_levels = np.array([self.LGS + i * self.Q_G for i in range(self.g_level)])
        self._read_sigma = np.array([self.read_variation[i] for i in range(self.g_level)], dtype=np.float32)
        self.reset(seed)

    # -- noise state ---------------------------------------------------------
    def reset(self, seed=None):
        """Rewind the call counter to 0 and set the seed (None: ``DEFAULT_SEED``)."""
        if seed is None:
            seed = DEFAULT_SEED
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed < 2 ** 64:
            raise ValueError("argument 'seed': expected an int in [0, 2**64), got %r" % (seed,))
        self.seed = int(seed)
        self.calls = 0

    @property
    def program_seed(self):
        """Seed of weight programming (write variation, stuck-at faults): the engine seed."""
        return self.seed

    @property
    def noise_free(self):
        """True when every noise source is off: results are then exact (spec 'noise-free exactness')."""
        return (self.write_variation == 0 and self.vnoise == 0 and self.rate_stuck_HGS == 0
                and self.rate_stuck_LGS == 0 and not self._read_sigma.any())

    def _radc_lsb_first(self, n_slices):
        if self.radc_is_list:
            if len(self.radc) != n_slices:
                raise ValueError(f'Length of radc array ({len(self.radc)}) must match number of weight slices '
                                 f'({n_slices})')
            return list(reversed(self.radc))
        return [self.radc] * n_slices

    def __repr__(self):
        return ("DPETensor(HGS=%g, LGS=%g, g_level=%d, write_variation=%g, read_variation=%s, vnoise=%g, rdac=%d, "
                "radc=%s, vread=%g, rate_stuck_HGS=%g, rate_stuck_LGS=%g, seed=%d, calls=%d)"
                % (self.HGS, self.LGS, self.g_level, self.write_variation, self.read_variation, self.vnoise,
                   self.rdac, self.radc, self.vread, self.rate_stuck_HGS, self.rate_stuck_LGS, self.seed, self.calls))

    # -- products --------------------------------------------------------------
    def __call__(self, x, mat):
        return self.MapReduceDot(x, mat)

    def MapReduceDot(self, x, mat, out=None):
        """x @ mat through the crossbar: x a sliced input (R, K) or (N, R, K), mat sliced weights (K, P).

        Returns float32 (R, P) or (N, R, P): a torch tensor when x's data came in as torch, else
        NumPy. ``out`` (optional) is a writable float32 array of shape (N, R, P) written in place.
        """
        self._check_pair(x, mat)
        result = self._run(x, mat, out, self.calls % 2 ** 32, 0)
        self.calls += 1
        if len(x.shape) == 2:
            result = np.asarray(result)[0]
            return _torch().from_numpy(result) if x._is_torch else result
        return result.to_torch() if x._is_torch else np.asarray(result)

    def _check_pair(self, x, mat):
        from .sliced import SlicedData
        if not isinstance(x, SlicedData) or not isinstance(mat, SlicedData):
            raise TypeError("MapReduceDot takes two SlicedData (input, weights), got %s and %s"
                            % (type(x).__name__, type(mat).__name__))
        if x._codes is None:
            raise ValueError("argument 'x': the input is not sliced yet (call slice_data_imp)")
        if mat._codes is None and mat._levels is None:
            raise ValueError("argument 'mat': the weights are not sliced yet (call slice_data_imp)")
        if not mat.is_weight:
            raise ValueError("argument 'mat': expected weights (SlicedData(..., is_weight=True))")
        if x.shape[-1] != mat.shape[-2]:
            raise ValueError('The input data mismatches the shape of weight data!')
        if x.paral_size[1] != mat.paral_size[0]:
            raise ValueError("paral_size mismatch: the input's block columns (%d) must equal the weights' block rows "
                             "(%d), the crossbar height" % (x.paral_size[1], mat.paral_size[0]))
        if (x.bw_e is None) != (mat.bw_e is None):
            raise ValueError("input and weights must both be INT (bw_e=None) or both BFP")
        self._radc_lsb_first(len(mat))
        if self.wire_resistance > 0:
            raise NotImplementedError('The wire_factor is not supported in the training version!')
        if max(2 ** w - 1 for w in mat._widths) > self.g_level - 1:
            raise ValueError('The weight data is out of the range!')
        self._ensure_programmed(mat)

    def _run(self, x, mat, out, call, item0):
        """One kernel call on checked operands (x's batch items start at item0 of the logical batch)."""
        args = (x._codes, x._gran_scale, x._granule, x._widths,
                mat._levels, mat._conductance, mat._gran_scale[0], mat._granule, mat._widths,
                x.paral_size[1], self.rdac, self.g_level, self._radc_lsb_first(len(mat)), self.HGS, self.LGS,
                self._read_sigma if self._read_sigma.any() else None, self.vnoise, self.seed, call, out, item0)
        if self._cl is None:
            return _core.dpe_mvm(*args)
        from .devices import cl_dpe_mvm  # weights stay resident while (object, version) is unchanged
        return cl_dpe_mvm(self._cl, *args, weights_key=(id(mat), mat._version))

    def _sliced_product(self, x, w_sliced, input_slice, input_paral_size, input_quant_gran, bw_e, return_dequant):
        """Slice x and multiply, a chunk of batch items at a time when the slice codes of the whole
        batch would be large: peak memory then stays at the output plus one chunk, and the chunks
        draw exactly the noise of one unchunked call (noise indices carry the batch offset)."""
        from .sliced import SlicedData
        shape = tuple(getattr(x, "shape", ()))

        def sliced(data):
            xs = SlicedData(input_slice, bw_e=bw_e, is_weight=False, paral_size=input_paral_size,
                            quant_gran=input_quant_gran, inference=not return_dequant)
            xs.slice_data_imp(self, data)
            return xs
        per_item = int(np.prod(shape[1:], dtype=np.int64)) * len(_widths_of(input_slice)) if len(shape) == 3 else 0
        chunk = max(1, _CHUNK_CODE_BYTES // per_item) if per_item else 0
        if len(shape) != 3 or chunk >= shape[0]:
            xs = sliced(x)
            out = self.MapReduceDot(xs, w_sliced)
            dq = None
            if return_dequant:
                dq = xs._dequant if len(xs.shape) == 3 else xs._dequant[0]
                dq = _torch().from_numpy(dq) if xs._is_torch else dq
            return out, dq
        out = np.empty((shape[0], shape[1], w_sliced.shape[1]), np.float32)
        dq = np.empty(shape, np.float32) if return_dequant else None
        call = self.calls % 2 ** 32
        for s0 in range(0, shape[0], chunk):
            xs = sliced(x[s0:s0 + chunk])
            self._check_pair(xs, w_sliced)
            self._run(xs, w_sliced, out[s0:s0 + chunk], call, s0)
            if dq is not None:
                dq[s0:s0 + chunk] = xs._dequant
        self.calls += 1
        if _is_torch(x):
            torch = _torch()
            return torch.from_numpy(out), (torch.from_numpy(dq) if dq is not None else None)
        return out, dq

    # -- fused layer entry points (used by pyfastpim.nn) -----------------------
    def forward_linear(self, x, w_sliced, input_slice, input_paral_size=(1, 32), input_quant_gran=(1, 32), bw_e=None,
                       return_dequant=False):
        """x (N, K) or (B, N, K) @ programmed weights ``w_sliced`` (K, P), without bias.

        Returns ``(out, xq)``: out shaped like x with K replaced by P (torch when x is torch);
        xq, the dequantized input (for straight-through gradients), only when ``return_dequant``.
        Large batches are sliced and multiplied a chunk at a time (see ``_sliced_product``).
        """
        return self._sliced_product(x, w_sliced, input_slice, input_paral_size, input_quant_gran, bw_e,
                                    return_dequant)

    def forward_conv2d(self, x, w_sliced, kernel_size, stride=1, padding=0, dilation=1, input_slice=(1, 1, 2, 2),
                       input_paral_size=(1, 32), input_quant_gran=(1, 32), bw_e=None, return_dequant=False):
        """2-D convolution of x (N, C_in, H, W) through the crossbar, without bias.

        ``w_sliced`` holds ``W.reshape(C_out, -1).T`` (C_in*kh*kw, C_out) programmed. The input is
        read as its unfolded patch matrix (N, H_out*W_out, C_in*kh*kw) in torch's unfold order and
        quantized, sliced and converted by the DACs inside the kernel (implicit im2col): the unfolded
        matrix is never stored. Returns ``(out (N, C_out, H_out, W_out), xq)``, xq the dequantized
        unfolded input only when ``return_dequant`` (training).
        """
        from .sliced import SlicedData, _widths
        if not isinstance(w_sliced, SlicedData) or not w_sliced.is_weight or w_sliced._levels is None:
            raise TypeError("argument 'w_sliced': expected programmed weights (SlicedData(..., is_weight=True))")
        kh, kw = _pair(kernel_size, "kernel_size", 1)
        sh, sw = _pair(stride, "stride", 1)
        ph, pw = _pair(padding, "padding", 0)
        dh, dw = _pair(dilation, "dilation", 1)
        shape = tuple(getattr(x, "shape", ()))
        if len(shape) != 4:
            raise ValueError("argument 'x': expected a 4-D (N, C, H, W) input, got shape %r" % (shape,))
        K = shape[1] * kh * kw
        if K != w_sliced.shape[0]:
            raise ValueError("argument 'x': %d channels x %dx%d kernel = %d patch values, but the weights have %d rows"
                             % (shape[1], kh, kw, K, w_sliced.shape[0]))
        input_paral_size = _pair(input_paral_size, "input_paral_size", 1)
        if input_paral_size[1] != w_sliced.paral_size[0]:
            raise ValueError("paral_size mismatch: the input's block columns (%d) must equal the weights' block rows "
                             "(%d), the crossbar height" % (input_paral_size[1], w_sliced.paral_size[0]))
        if (bw_e is None) != (w_sliced.bw_e is None):
            raise ValueError("input and weights must both be INT (bw_e=None) or both BFP")
        radc = self._radc_lsb_first(len(w_sliced))
        if self.wire_resistance > 0:
            raise NotImplementedError('The wire_factor is not supported in the training version!')
        self._ensure_programmed(w_sliced)
        ho = (shape[2] + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        wo = (shape[3] + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        granule = _resolve_granule(max(ho, 1) * max(wo, 1), K, input_paral_size, input_quant_gran)
        is_torch = _is_torch(x)
        if is_torch and x.requires_grad:
            x = x.detach()
        args = (x, (kh, kw), (sh, sw), (ph, pw), (dh, dw), granule, _widths(input_slice), bw_e is not None,
                w_sliced._levels, w_sliced._conductance, w_sliced._gran_scale[0], w_sliced._granule, w_sliced._widths,
                input_paral_size[1], self.rdac, self.g_level, radc, self.HGS, self.LGS,
                self._read_sigma if self._read_sigma.any() else None, self.vnoise, self.seed, self.calls % 2 ** 32,
                bool(return_dequant))
        if self._cl is None:
            out, dq = _core.dpe_conv2d(*args)
        else:
            from .devices import cl_dpe_conv2d  # weights stay resident while (object, version) is unchanged
            out, dq = cl_dpe_conv2d(self._cl, *args, weights_key=(id(w_sliced), w_sliced._version))
        self.calls += 1
        if is_torch:
            return out.to_torch(), (dq.to_torch() if dq is not None else None)
        return np.asarray(out), (np.asarray(dq) if dq is not None else None)

    def _ensure_programmed(self, mat):
        """Re-programs weights that were sliced with another engine's device parameters."""
        from .sliced import _check_engine, program_weights
        key = _check_engine(self)
        if mat._levels is not None and mat._program == key:
            return
        g_level, HGS, LGS, wv, rh, rl, seed = key
        levels, conductance = program_weights(mat._codes, mat._widths, g_level, HGS, LGS, wv, rh, rl, seed)
        mat._levels = levels
        mat._conductance = conductance if (wv > 0 or rh > 0 or rl > 0) else None
        mat._program = key
        mat._version += 1


def dpe_matmul(x, w, engine, input_slice=(1, 1, 2, 2), weight_slice=(1, 1, 2, 2), input_paral_size=(1, 32),
               weight_paral_size=(32, 32), input_quant_gran=(1, 32), weight_quant_gran=(32, 32), bw_e=None):
    """One call: slice x (R, K) or (N, R, K) and w (K, P), program w on ``engine`` and multiply.

    NumPy or torch inputs (zero-copy for float32); returns NumPy float32, or torch when x is torch.
    """
    from .sliced import SlicedData
    if not isinstance(engine, DPETensor):
        raise TypeError("argument 'engine': expected a pyfastpim.DPETensor, got %s" % type(engine).__name__)
    ws = SlicedData(weight_slice, bw_e=bw_e, is_weight=True, paral_size=weight_paral_size,
                    quant_gran=weight_quant_gran, inference=True)
    ws.slice_data_imp(engine, w)
    return engine._sliced_product(x, ws, input_slice, input_paral_size, input_quant_gran, bw_e, False)[0]
