"""Small ONNX models built in code (no downloads), for the demo, the tests and the benchmarks.

Weights are deterministic random numbers: they do not change kernel speed, shapes do. The families mirror the real
architectures' operator mix (ResNet basic and bottleneck blocks, MobileNetV2 inverted residuals with depthwise
convolutions, BERT encoder layers); widths and depths are parameters so that benchmarks fit a small machine.
Nothing here imports TVM: only onnx and numpy.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class _Graph:
    """Accumulates nodes and initializers; every helper returns the name of the value it produced."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.n = 0

    def name(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def weight(self, shape: tuple[int, ...], scale: float = 0.1) -> str:
        name = self.name("w")
        self.inits.append(numpy_helper.from_array((self.rng.standard_normal(shape) * scale).astype("float32"), name))
        return name

    def const(self, values, dtype=np.int64) -> str:
        name = self.name("c")
        self.inits.append(numpy_helper.from_array(np.asarray(values, dtype=dtype), name))
        return name

    def op(self, op_type: str, inputs: list[str], **attrs) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def model(self, name: str, inputs: list[onnx.ValueInfoProto], output: str, out_shape: list) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            name,
            inputs,
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, out_shape)],
            initializer=self.inits,
        )
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])

    # -- layers ----------------------------------------------------------------------------------------------------

    def conv(self, x: str, c_in: int, c_out: int, k: int, stride: int = 1, group: int = 1, act: str | None = "Relu"):
        """Conv with bias, then the activation. BatchNorm is folded into the conv's weights and bias, as PyTorch's
        and Paddle's exporters do for inference."""
        w, b = self.weight((c_out, c_in // group, k, k)), self.weight((c_out,))
        pads = [k // 2] * 4
        y = self.op("Conv", [x, w, b], kernel_shape=[k, k], strides=[stride, stride], pads=pads, group=group)
        if act == "Relu":
            y = self.op("Relu", [y])
        elif act == "Relu6":
            y = self.op("Clip", [y, self.const(0.0, "float32"), self.const(6.0, "float32")])
        return y

    def dense(self, x: str, n_in: int, n_out: int) -> str:
        return self.op("Add", [self.op("MatMul", [x, self.weight((n_in, n_out))]), self.weight((n_out,))])


def _image_input(batch: int, image: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, image, image])


def _classifier(g: _Graph, x: str, channels: int, classes: int) -> str:
    pooled = g.op("Flatten", [g.op("GlobalAveragePool", [x])])
    return g.op("Gemm", [pooled, g.weight((classes, channels)), g.weight((classes,))], transB=1)


def resnet(
    depth: int = 18, batch: int = 1, image: int = 64, width: int = 16, classes: int = 100, seed: int = 0
) -> onnx.ModelProto:
    """A ResNet-{18,34,50}-style CNN: stem, four stages of basic (18/34) or bottleneck (50) blocks, classifier."""
    blocks = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3)}[depth]
    bottleneck = depth >= 50
    g = _Graph(seed)
    x = g.conv("x", 3, width, 7, stride=2)
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c_in = width
    for stage, n in enumerate(blocks):
        mid = width * 2**stage
        c_out = mid * 4 if bottleneck else mid
        for i in range(n):
            stride = 2 if (i == 0 and stage > 0) else 1
            if bottleneck:
                y = g.conv(x, c_in, mid, 1)
                y = g.conv(y, mid, mid, 3, stride)
                y = g.conv(y, mid, c_out, 1, act=None)
            else:
                y = g.conv(x, c_in, mid, 3, stride)
                y = g.conv(y, mid, c_out, 3, act=None)
            short = x if (stride == 1 and c_in == c_out) else g.conv(x, c_in, c_out, 1, stride, act=None)
            x = g.op("Relu", [g.op("Add", [y, short])])
            c_in = c_out
    out = _classifier(g, x, c_in, classes)
    return g.model(f"resnet{depth}", [_image_input(batch, image)], out, [batch, classes])


def mobilenet_v2(batch: int = 1, image: int = 64, width: int = 16, classes: int = 100, seed: int = 0):
    """A MobileNetV2-style CNN: inverted residual blocks (1x1 expand, 3x3 depthwise, 1x1 project), ReLU6."""
    # (expansion, output channels as a multiple of width/16, repeats, stride), as in the paper's table 2
    settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2)]
    g = _Graph(seed)
    c_in = 2 * width
    x = g.conv("x", 3, c_in, 3, stride=2, act="Relu6")
    for t, c, n, s in settings:
        c_out = c * width // 16
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = c_in * t
            y = g.conv(x, c_in, hidden, 1, act="Relu6") if t != 1 else x
            y = g.conv(y, hidden, hidden, 3, stride, group=hidden, act="Relu6")
            y = g.conv(y, hidden, c_out, 1, act=None)
            x = g.op("Add", [x, y]) if (stride == 1 and c_in == c_out) else y
            c_in = c_out
    x = g.conv(x, c_in, 4 * c_in, 1, act="Relu6")
    out = _classifier(g, x, 4 * c_in, classes)
    return g.model("mobilenet_v2", [_image_input(batch, image)], out, [batch, classes])


def bert(layers: int = 2, hidden: int = 128, heads: int = 2, seq: int = 32, batch: int = 1, seed: int = 0):
    """A BERT-style encoder: self-attention and a GELU feed-forward block per layer, each with LayerNorm."""
    g = _Graph(seed)
    head = hidden // heads

    def split_heads(t: str) -> str:  # (B, S, H) -> (B, heads, S, head)
        t = g.op("Reshape", [t, g.const([batch, seq, heads, head])])
        return g.op("Transpose", [t], perm=[0, 2, 1, 3])

    def layer_norm(t: str) -> str:
        return g.op("LayerNormalization", [t, g.weight((hidden,)), g.weight((hidden,))], axis=-1, epsilon=1e-5)

    x = "x"
    for _ in range(layers):
        q, k, v = (split_heads(g.dense(x, hidden, hidden)) for _ in range(3))
        scores = g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])])
        scores = g.op("Mul", [scores, g.const(1.0 / head**0.5, "float32")])
        ctx = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v])
        ctx = g.op("Reshape", [g.op("Transpose", [ctx], perm=[0, 2, 1, 3]), g.const([batch, seq, hidden])])
        x = layer_norm(g.op("Add", [x, g.dense(ctx, hidden, hidden)]))
        ff = g.dense(x, hidden, 4 * hidden)
        ff = g.op("Mul", [ff, g.op("Sigmoid", [g.op("Mul", [ff, g.const(1.702, "float32")])])])  # GELU, sigmoid form
        x = layer_norm(g.op("Add", [x, g.dense(ff, 4 * hidden, hidden)]))
    inp = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, hidden])
    return g.model(f"bert-{layers}x{hidden}", [inp], x, [batch, seq, hidden])


def mlp(batch: int = 16, sizes: tuple[int, ...] = (128, 256, 64), seed: int = 0) -> onnx.ModelProto:
    """Dense -> ReLU layers: one fused matmul task per layer."""
    g = _Graph(seed)
    x = "x"
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:], strict=False)):
        x = g.dense(x, n_in, n_out)
        if i < len(sizes) - 2:
            x = g.op("Relu", [x])
    inp = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, sizes[0]])
    return g.model("mlp", [inp], x, [batch, sizes[-1]])


def exported_mlp(n_in: int = 64, n_out: int = 32, seed: int = 0) -> onnx.ModelProto:
    """An MLP as PyTorch exports it: a symbolic batch, and a Reshape whose target is computed at run time
    (Shape -> Gather -> Div -> Concat). TVM's importer refuses that Reshape ("Reshape requires the input new shape to
    be Shape") until the batch is fixed and the chain folded."""
    g = _Graph(seed)
    y = g.op("Relu", [g.dense("x", n_in, n_out)])
    half = g.op("Div", [g.op("Gather", [g.op("Shape", [y]), g.const([1])], axis=0), g.const([2])])
    y = g.op("Reshape", [y, g.op("Concat", [g.const([-1]), half, g.const([2])], axis=0)])
    inp = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", n_in])
    return g.model("exported_mlp", [inp], y, ["batch", n_out // 2, 2])


ZOO: dict[str, Callable[..., onnx.ModelProto]] = {
    "resnet18": lambda **kw: resnet(18, **kw),
    "resnet34": lambda **kw: resnet(34, **kw),
    "resnet50": lambda **kw: resnet(50, **kw),
    "mobilenet_v2": mobilenet_v2,
    "bert-tiny": lambda **kw: bert(layers=2, hidden=128, heads=2, **kw),
    "bert-mini": lambda **kw: bert(layers=4, hidden=256, heads=4, **kw),
    "mlp": mlp,
}
