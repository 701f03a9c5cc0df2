"""DDP (and FSDP2) trained with rcoll and with gloo in the same job.

Two models per run, identical at the start, one wrapped over the rcoll
default group and one over a gloo group, fed the same batches:
- an exact model: float64 linear regression with small dyadic weights and
  integer data, so every gradient sum is exact in any order; losses and
  parameters must be identical on 2 and 4 ranks;
- a float32 MLP with random data and Adam: identical on 2 ranks (a sum of
  two is the same in any order), within 1e-5 relative on 4 (rcoll and gloo
  add the four gradients in different orders).
"""
import copy

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import harness


def exact_model():
    m = nn.Linear(8, 4).double()
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        m.weight.copy_(torch.randint(-4, 5, (4, 8), generator=g) / 8.0)
        m.bias.copy_(torch.randint(-4, 5, (4,), generator=g) / 8.0)
    return m


def exact_batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randint(-3, 4, (16, 8), generator=g).double()
    y = torch.randint(-3, 4, (16, 4), generator=g).double()
    return x, y


def mlp_model():
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))


def mlp_batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(20, 32, generator=g), torch.randn(20, 8, generator=g)


def train(model, opt, batch, steps, rank):
    losses = []
    for step in range(steps):
        x, y = batch(rank, step)
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).sum()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def fam_ddp(rank, world, gloo, kind):
    if kind == "exact":
        base, batch, steps = exact_model(), exact_batch, 5
        make_opt = lambda p: torch.optim.SGD(p, lr=2.0 ** -6)  # noqa: E731
    else:
        base, batch, steps = mlp_model(), mlp_batch, 10
        make_opt = lambda p: torch.optim.Adam(p, lr=1e-3)  # noqa: E731
    res = {}
    for name, group in (("rcoll", None), ("gloo", gloo)):
        m = DDP(copy.deepcopy(base), process_group=group,
                bucket_cap_mb=0.001)  # several buckets, overlapping
        losses = train(m, make_opt(m.parameters()), batch, steps, rank)
        res[name] = (losses, [p.detach().clone() for p in m.parameters()])
    (lr, pr), (lg, pg) = res["rcoll"], res["gloo"]
    if kind == "exact" or world == 2:
        assert lr == lg, (lr, lg)
        for a, b in zip(pr, pg):
            assert torch.equal(a, b)
    else:
        assert torch.allclose(torch.tensor(lr), torch.tensor(lg),
                              rtol=1e-5), (lr, lg)
        for a, b in zip(pr, pg):
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    # every rank ends with the same parameters
    for p in pr:
        ps = [torch.empty_like(p) for _ in range(world)]
        dist.all_gather(ps, p)
        for q in ps:
            assert torch.equal(q, p)
    return lr


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("kind", ["exact", "mlp"])
def test_ddp_matches_gloo(world, kind):
    losses = harness.pooled(fam_ddp, world, kind)
    assert all(len(x) > 0 for x in losses)
    print(kind, world, losses[0])


def fam_fsdp(rank, world, gloo):
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    res = {}
    for name, group in (("rcoll", dist.group.WORLD), ("gloo", gloo)):
        mesh = DeviceMesh.from_group(group, "cpu")
        model = exact_model()
        fully_shard(model, mesh=mesh)
        opt = torch.optim.SGD(model.parameters(), lr=2.0 ** -6)
        losses = train(model, opt, exact_batch, 5, rank)
        params = [p.full_tensor().detach().clone()
                  for p in model.parameters()]
        res[name] = (losses, params)
    (lr, pr), (lg, pg) = res["rcoll"], res["gloo"]
    assert lr == lg, (lr, lg)
    for a, b in zip(pr, pg):
        assert torch.equal(a, b)
    return lr


@pytest.mark.parametrize("world", [2, 4])
def test_fsdp2_matches_gloo(world):
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError:
        pytest.skip("this torch has no FSDP2 (fully_shard)")
    harness.pooled(fam_fsdp, world)
