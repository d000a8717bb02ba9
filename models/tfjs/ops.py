"""TensorFlow ops as TensorFlow.js's CPU backend computes them, on torch tensors.

Tensors keep TensorFlow's layout (NHWC for images). A convolution or pooling views its
input as NCHW with `permute`, which is free on an NHWC tensor (torch's channels-last
layout) and runs torch's own kernels; its output is viewed back the same way.

An op receives its step (the node, and the static shapes of its inputs at batch 1,
which the module records by running the graph once at build) and its inputs: torch
tensors, or numpy arrays for the inputs that `STATIC_INPUTS` names (shapes, axes,
paddings), read as Python values. Nothing reads a shape from a tensor, and nothing makes
a tensor from Python data, so that a trace records no constant of one input's making
and the module traces for every batch size. A filter is given in torch's layout
(`torch_filter`). `Unsupported` names what an op cannot do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

from models.tfjs.graph import Node

DTYPES = {"float32": torch.float32, "int32": torch.int32, "bool": torch.bool}


class Unsupported(ValueError):
    """An op, or one of its attributes, that the loader does not compute."""


@dataclass
class Step:
    node: Node
    shapes: list[tuple[int, ...]] | None = None  # each input's shape at batch 1; None while they are measured

    def attr(self, key: str, default: Any = None) -> Any:
        return self.node.attr(key, default)

    @property
    def op(self) -> str:
        return self.node.op

    def shape(self, args: tuple, i: int) -> tuple[int, ...]:
        """Input i's shape at batch 1 (its dimensions, read while measuring)."""
        if self.shapes is not None:
            return self.shapes[i]
        value = args[i]
        return tuple(int(d) for d in value.shape)


def static(step: Step, value: Any, what: str) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        raise Unsupported(f"{what} must be a constant, and here it is computed")
    return np.asarray(value)


def ints(step: Step, value: Any, what: str) -> list[int]:
    return [int(v) for v in static(step, value, what).reshape(-1)]


def tensor(value: Any) -> torch.Tensor:
    """A constant given as numpy, while the module folds constants (never in a run)."""
    return value if isinstance(value, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(value))


def _pair(values: list[int]) -> tuple[int, int]:
    """[1, h, w, 1] (NHWC strides, sizes, dilations) -> (h, w)."""
    if len(values) != 4:
        raise Unsupported(f"4 values (NHWC) expected; were {values}")
    return values[1], values[2]


def _same(size: int, k: int, stride: int, dilation: int) -> tuple[int, int]:
    """TensorFlow's SAME padding of one axis: the odd pixel goes after."""
    out = -(-size // stride)
    total = max((out - 1) * stride + (k - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def _check_nhwc(step: Step) -> None:
    layout = step.attr("data_format", "NHWC")
    if layout != "NHWC":
        raise Unsupported(f"data_format {layout!r} (only NHWC, as TensorFlow.js's converter writes)")


# -- convolution and pooling ---------------------------------------------------------------------
def torch_filter(op: str, filt: np.ndarray) -> np.ndarray:
    """A TensorFlow filter -> torch's [out, in/groups, h, w]. Conv2D's is [h, w, in, out];
    a depthwise one's [h, w, in, multiplier], whose output channel c * multiplier + m
    is torch's group c's m-th."""
    if filt.ndim != 4:
        raise Unsupported(f"a 4-D filter expected; was {list(filt.shape)}")
    if op in DEPTHWISE:
        h, w, c, m = filt.shape
        return np.ascontiguousarray(filt.reshape(h, w, c * m).transpose(2, 0, 1)[:, None])
    return np.ascontiguousarray(filt.transpose(3, 2, 0, 1))


def _conv(step: Step, args: tuple, bias: torch.Tensor | None) -> torch.Tensor:
    x, weight = args[0], args[1]
    _check_nhwc(step)
    sh, sw = _pair(step.attr("strides", [1, 1, 1, 1]))
    dh, dw = _pair(step.attr("dilations", [1, 1, 1, 1]))
    padding = step.attr("padding", "VALID")
    _, height, width, channels = step.shape(args, 0)
    kh, kw = step.shape(args, 1)[2:]
    groups = channels if step.op in DEPTHWISE else 1
    if padding == "SAME":
        (top, bottom), (left, right) = _same(height, kh, sh, dh), _same(width, kw, sw, dw)
    elif padding == "VALID":
        top = bottom = left = right = 0
    elif padding == "EXPLICIT":
        pads = step.attr("explicit_paddings", [])
        if len(pads) != 8:
            raise Unsupported(f"explicit_paddings of 8 values expected; were {pads}")
        top, bottom, left, right = pads[2], pads[3], pads[4], pads[5]
    else:
        raise Unsupported(f"padding {padding!r}")
    nchw = x.permute(0, 3, 1, 2)
    if (top, left) == (bottom, right):
        out = F.conv2d(nchw, weight, bias, (sh, sw), (top, left), (dh, dw), groups)
    else:
        out = F.conv2d(F.pad(nchw, (left, right, top, bottom)), weight, bias, (sh, sw), 0, (dh, dw), groups)
    return out.permute(0, 2, 3, 1)


ACTIVATIONS: dict[str, Callable[..., torch.Tensor]] = {
    "Relu": lambda x, step, extra: F.relu(x),
    "Relu6": lambda x, step, extra: x.clamp(0.0, 6.0),
    "Elu": lambda x, step, extra: F.elu(x),
    "Sigmoid": lambda x, step, extra: torch.sigmoid(x),
    "LeakyRelu": lambda x, step, extra: F.leaky_relu(x, step.attr("leakyrelu_alpha", 0.2)),
    "Prelu": lambda x, step, extra: torch.where(x >= 0, x, x * extra),
}


def conv(step: Step, *args: torch.Tensor) -> torch.Tensor:
    """Conv2D, DepthwiseConv2dNative, and their fused forms: a BiasAdd, then at most one
    activation (grappler's fusions that TensorFlow.js runs)."""
    fused = step.attr("fused_ops", []) if step.op.startswith(("_Fused", "Fused")) else []
    if fused and fused[0] != "BiasAdd":
        raise Unsupported(f"fused_ops {fused}: only BiasAdd, then an activation")
    if len(fused) > 2 or (len(fused) == 2 and fused[1] not in ACTIVATIONS):
        raise Unsupported(f"fused_ops {fused}: the activation after BiasAdd is one of {sorted(ACTIVATIONS)}")
    bias = args[2].reshape(-1) if fused else None
    out = _conv(step, args, bias)
    if len(fused) == 2:
        out = ACTIVATIONS[fused[1]](out, step, args[3] if len(args) > 3 else None)
    return out


def max_pool(step: Step, *args: torch.Tensor) -> torch.Tensor:
    _check_nhwc(step)
    kh, kw = _pair(step.attr("ksize"))
    sh, sw = _pair(step.attr("strides"))
    padding = step.attr("padding", "VALID")
    _, height, width, _ = step.shape(args, 0)
    nchw = args[0].permute(0, 3, 1, 2)
    if padding == "SAME":
        (top, bottom), (left, right) = _same(height, kh, sh, 1), _same(width, kw, sw, 1)
        if (top, left) != (bottom, right) or top > kh // 2 or left > kw // 2:
            nchw = F.pad(nchw, (left, right, top, bottom), value=-math.inf)
            top = left = 0
    elif padding == "VALID":
        top = left = 0
    else:
        raise Unsupported(f"padding {padding!r}")
    return F.max_pool2d(nchw, (kh, kw), (sh, sw), (top, left)).permute(0, 2, 3, 1)


def resize_bilinear(step: Step, *args: Any) -> torch.Tensor:
    """TensorFlow's bilinear resize of NHWC images, legacy or half-pixel: each output
    pixel reads its two nearest source rows and columns, clamped to the image."""
    x = args[0]
    out_h, out_w = ints(step, args[1], "size")
    _, height, width, _ = step.shape(args, 0)
    align, half = step.attr("align_corners", False), step.attr("half_pixel_centers", False)
    lo_r, hi_r, fr = _resize_axis(x, height, out_h, align, half)
    lo_c, hi_c, fc = _resize_axis(x, width, out_w, align, half)
    fr, fc = fr.view(1, -1, 1, 1), fc.view(1, 1, -1, 1)
    top, bottom = x.index_select(1, lo_r), x.index_select(1, hi_r)
    tl, tr = top.index_select(2, lo_c), top.index_select(2, hi_c)
    bl, br = bottom.index_select(2, lo_c), bottom.index_select(2, hi_c)
    upper = tl + (tr - tl) * fc
    lower = bl + (br - bl) * fc
    return upper + (lower - upper) * fr


def _resize_axis(x: torch.Tensor, size: int, out: int, align: bool,
                 half: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The lower and upper source index of each output pixel, and the weight of the upper."""
    scale = (size - 1) / (out - 1) if align and out > 1 else size / out
    index = torch.arange(out, device=x.device, dtype=torch.float32)
    src = (index + 0.5) * scale - 0.5 if half else index * scale
    floor = src.floor()
    lower = floor.clamp(min=0).long()
    upper = src.ceil().clamp(max=size - 1).long()
    return lower, upper, (src - floor).to(x.dtype)


# -- elementwise ------------------------------------------------------------------------------------
def _binary(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]):
    def op(step: Step, a: Any, b: Any) -> torch.Tensor:
        return fn(tensor(a), tensor(b))

    return op


def _floor_div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.is_floating_point() or b.is_floating_point():
        return torch.floor(a / b)
    return torch.div(a, b, rounding_mode="floor")


def cast(step: Step, x: Any) -> torch.Tensor:
    to = step.attr("DstT")
    if to not in DTYPES:
        raise Unsupported(f"DstT {to!r} (float32, int32, bool)")
    return tensor(x).to(DTYPES[to])


# -- shapes -------------------------------------------------------------------------------------
def reshape(step: Step, *args: Any) -> torch.Tensor:
    """A converted graph fixes its batch at 1 in Reshape's shape. Where the input's first
    dimension is the batch (1 at build) and the new shape keeps it first, it stands for
    whatever batch comes; any other reshape is fixed to batch 1."""
    x = tensor(args[0])
    dims = ints(step, args[1], "shape")
    shape = step.shape(args, 0)
    if -1 not in dims and math.prod(dims) != math.prod(shape):
        raise Unsupported(f"shape {dims} holds {math.prod(dims)} values; the input {list(shape)} has "
                          f"{math.prod(shape)}")
    if step.shapes is not None and shape and shape[0] == 1 and dims and dims[0] == 1:
        dims = [-1, *dims[1:]] if -1 not in dims else [x.shape[0], *dims[1:]]
    return x.reshape(dims)


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def concat(step: Step, *args: Any) -> torch.Tensor:
    *values, axis = args
    parts = [tensor(v) for v in values]
    return torch.cat(parts, _axis(ints(step, axis, "axis")[0], parts[0].dim()))


def expand_dims(step: Step, x: Any, dim: Any) -> torch.Tensor:
    x = tensor(x)
    return x.unsqueeze(_axis(ints(step, dim, "dim")[0], x.dim() + 1))


def mean(step: Step, x: torch.Tensor, axes: Any) -> torch.Tensor:
    dims = [_axis(a, x.dim()) for a in ints(step, axes, "reduction_indices")]
    return x.mean(dim=dims, keepdim=step.attr("keep_dims", False))


def transpose(step: Step, x: torch.Tensor, perm: Any) -> torch.Tensor:
    return x.permute(ints(step, perm, "perm"))


def pad(step: Step, x: torch.Tensor, paddings: Any, value: Any = None) -> torch.Tensor:
    pairs = static(step, paddings, "paddings").reshape(-1, 2).tolist()
    flat = [int(p) for before_after in reversed(pairs) for p in before_after]
    fill = 0.0 if value is None else float(static(step, value, "constant_values").reshape(-1)[0])
    return F.pad(x, flat, value=fill)


def split_v(step: Step, *args: Any) -> tuple[torch.Tensor, ...]:
    x = args[0]
    dim = _axis(ints(step, args[2], "split_dim")[0], x.dim())
    parts = ints(step, args[1], "size_splits")
    if parts.count(-1) == 1:
        parts[parts.index(-1)] = step.shape(args, 0)[dim] - sum(p for p in parts if p != -1)
    return tuple(torch.split(x, parts, dim))


def strided_slice(step: Step, x: Any, begin: Any, end: Any, strides: Any) -> torch.Tensor:
    x = tensor(x)
    if step.attr("ellipsis_mask", 0) or step.attr("new_axis_mask", 0):
        raise Unsupported("ellipsis_mask and new_axis_mask")
    b, e, s = ints(step, begin, "begin"), ints(step, end, "end"), ints(step, strides, "strides")
    bmask, emask, shrink = step.attr("begin_mask", 0), step.attr("end_mask", 0), step.attr("shrink_axis_mask", 0)
    index: list[Any] = []
    for i, (start, stop, stride) in enumerate(zip(b, e, s)):
        if stride <= 0:
            raise Unsupported(f"stride {stride}: only positive strides")
        if shrink >> i & 1:
            index.append(start)
            continue
        index.append(slice(None if bmask >> i & 1 else start, None if emask >> i & 1 else stop, stride))
    return x[tuple(index)]


def gather(step: Step, params: Any, indices: Any, axis: Any) -> torch.Tensor:
    if step.attr("batch_dims", 0):
        raise Unsupported("batch_dims other than 0")
    params, idx = tensor(params), tensor(indices).long()
    dim = _axis(ints(step, axis, "axis")[0], params.dim())
    picked = params.index_select(dim, idx.reshape(-1))
    return picked.reshape(*params.shape[:dim], *idx.shape, *params.shape[dim + 1:])


def top_k(step: Step, x: torch.Tensor, k: Any) -> tuple[torch.Tensor, torch.Tensor]:
    values, indices = torch.topk(x, ints(step, k, "k")[0], dim=-1, largest=True, sorted=True)
    return values, indices.to(torch.int32)


def sparse_to_dense(step: Step, indices: Any, shape: Any, values: Any, default: Any) -> torch.Tensor:
    dims = ints(step, shape, "output_shape")
    vals = tensor(values)
    out = torch.full(dims, tensor(default).item(), dtype=vals.dtype)
    idx = tensor(indices).long().reshape(-1, len(dims)) if len(dims) else None
    if idx is not None and idx.numel():
        out[tuple(idx.t())] = vals.expand(idx.shape[0]) if vals.dim() == 0 else vals
    return out


def identity(step: Step, x: Any) -> Any:
    return x


OPS: dict[str, Callable[..., Any]] = {
    "Identity": identity,
    "Conv2D": conv, "_FusedConv2D": conv, "DepthwiseConv2dNative": conv, "FusedDepthwiseConv2dNative": conv,
    "MaxPool": max_pool,
    "ResizeBilinear": resize_bilinear,
    "Add": _binary(torch.add), "AddV2": _binary(torch.add), "Sub": _binary(torch.sub), "Mul": _binary(torch.mul),
    "FloorDiv": _binary(_floor_div), "FloorMod": _binary(torch.remainder), "Equal": _binary(torch.eq),
    "Relu": lambda step, x: F.relu(x),
    "Relu6": lambda step, x: x.clamp(0.0, 6.0),
    "Sigmoid": lambda step, x: torch.sigmoid(x),
    "LeakyRelu": lambda step, x: F.leaky_relu(x, step.attr("alpha", 0.2)),
    "Cast": cast,
    "Reshape": reshape, "ConcatV2": concat, "ExpandDims": expand_dims, "Mean": mean, "Transpose": transpose,
    "Pad": pad, "PadV2": pad, "SplitV": split_v, "StridedSlice": strided_slice, "GatherV2": gather,
    "TopKV2": top_k, "SparseToDense": sparse_to_dense,
}
DEPTHWISE = ("DepthwiseConv2dNative", "FusedDepthwiseConv2dNative")
CONVOLUTIONS = ("Conv2D", "_FusedConv2D", *DEPTHWISE)
# inputs read as Python values (numpy constants), by position (-1: the last)
STATIC_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "ConcatV2": (-1,), "ExpandDims": (1,), "Mean": (1,), "Transpose": (1,), "Pad": (1,),
    "PadV2": (1, 2), "SplitV": (1, 2), "StridedSlice": (1, 2, 3), "GatherV2": (2,), "TopKV2": (1,),
    "ResizeBilinear": (1,), "SparseToDense": (1,),
}
