"""Per-shape TorchScript traces: the same results as eager PyTorch, and eager wherever
a trace would not be."""

from __future__ import annotations

import torch

from models.tracing import TracedModule


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Conv2d(8, 2, 1)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        return {"a": self.head(y), "b": y.mean(dim=(2, 3)).reshape(x.shape[0], -1)}


class Steered(torch.nn.Module):
    def forward(self, x):
        return x * 2 if x.sum() > 0 else x * 3  # a branch on a value


def test_traces_match_eager_at_every_shape():
    net = Net().eval()
    traced = TracedModule(net, "net")
    for shape in [(1, 3, 16, 24), (4, 3, 16, 24), (4, 3, 32, 8), (1, 3, 16, 24)]:
        for seed in (1, 2):  # a shape's first call (traced then) and a later one (through the trace)
            x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
            got, want = traced(x), net(x)
            assert torch.allclose(got["a"], want["a"], atol=1e-5) and torch.allclose(got["b"], want["b"], atol=1e-5)
    assert all(t is not None for t in traced._traces.values()) and len(traced._traces) == 2  # one per resolution


def test_value_dependent_control_flow_runs_eagerly():
    traced = TracedModule(Steered(), "steered")
    assert torch.equal(traced(torch.ones(2, 2)), torch.full((2, 2), 2.0))
    assert torch.equal(traced(-torch.ones(2, 2)), torch.full((2, 2), -3.0))  # a trace would give -2
    assert traced._traces[((2, 2), "torch.float32")] is None and not traced.enabled


class BatchBaked(torch.nn.Module):
    """Correct eagerly at any batch size; its trace unpacks as many rows as it was traced with."""

    def forward(self, x):
        return torch.cat([row * (i + 1) for i, row in enumerate(torch.split(x, 1))])


def test_one_trace_serves_every_batch_size_of_a_resolution():
    net = Net().eval()
    traced = TracedModule(net, "net")
    for n in (2, 3, 5, 1, 8):
        x = torch.randn(n, 3, 16, 24, generator=torch.Generator().manual_seed(n))
        got, want = traced(x), net(x)
        assert torch.allclose(got["a"], want["a"], atol=1e-5) and torch.allclose(got["b"], want["b"], atol=1e-5)
    # traced once (at the first size), tried once (at the second), then reused: tracing
    # each new batch size stalls a serving lane for 3-8 batches' time
    assert len(traced._traces) == 1
    assert traced._generic[((3, 16, 24), "torch.float32")] is traced._traces[((2, 3, 16, 24), "torch.float32")]


def test_a_trace_that_bakes_in_its_batch_size_is_traced_per_size():
    module = BatchBaked()
    traced = TracedModule(module, "baked")
    for n in (2, 3, 4, 3):
        x = torch.arange(n * 2, dtype=torch.float32).reshape(n, 2)
        assert torch.equal(traced(x), module(x))
    assert traced._generic[((2,), "torch.float32")] is None
    assert sorted(k[0][0] for k, t in traced._traces.items() if t is not None) == [2, 3, 4]
