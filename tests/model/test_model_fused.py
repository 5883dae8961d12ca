"""The fused projection+max against the naive [B, T, V] version: values, gradients, memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from model_fixtures import one_thread  # noqa: F401

from lr_opensearch.model import naive_projection_max, projection_max

pytestmark = pytest.mark.usefixtures("one_thread")


def _inputs(dtype: torch.dtype, batch: int = 3, length: int = 6, hidden: int = 5, vocab: int = 11,
            seed: int = 0) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(batch, length, hidden, generator=gen, dtype=dtype, requires_grad=True)
    w = torch.randn(vocab, hidden, generator=gen, dtype=dtype, requires_grad=True)
    b = torch.randn(vocab, generator=gen, dtype=dtype, requires_grad=True)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[1, 4:] = 0  # right padding
    mask[2, :2] = 0  # left padding
    return h, mask, w, b


@pytest.mark.parametrize("chunk", [1, 4, 11, None])
def test_fused_equals_naive_in_value(chunk: int | None) -> None:
    h, mask, w, b = _inputs(torch.float32, batch=4, length=9, hidden=8, vocab=37)
    fused = projection_max(h, mask, w, b, chunk=chunk)
    naive = naive_projection_max(h, mask, w, b)
    assert fused.shape == (4, 37)
    torch.testing.assert_close(fused, naive, rtol=0, atol=1e-6)


def test_padding_positions_never_win() -> None:
    h, mask, w, b = _inputs(torch.float64)
    with torch.no_grad():
        h[1, 4:] = 1e6  # huge values at padding must be ignored
        h[2, :2] = 1e6
    torch.testing.assert_close(projection_max(h, mask, w, b, chunk=3),
                               naive_projection_max(h, mask, w, b))
    assert projection_max(h, mask, w, b).abs().max() < 1e3


@pytest.mark.parametrize("with_bias", [True, False])
def test_gradcheck_float64(with_bias: bool) -> None:
    h, mask, w, b = _inputs(torch.float64)
    bias = b if with_bias else None

    def fused(hh: torch.Tensor, ww: torch.Tensor, *bb: torch.Tensor) -> torch.Tensor:
        return projection_max(hh, mask, ww, bb[0] if bb else None, chunk=4)

    args = (h, w, b) if with_bias else (h, w)
    assert torch.autograd.gradcheck(fused, args, eps=1e-6, atol=1e-5)
    # and the same gradients as autograd through the naive version
    upstream = torch.randn(3, 11, dtype=torch.float64)
    grads_fused = torch.autograd.grad((fused(*args) * upstream).sum(), args)
    naive = naive_projection_max(h, mask, w, bias)
    grads_naive = torch.autograd.grad((naive * upstream).sum(), args)
    for gf, gn in zip(grads_fused, grads_naive, strict=True):
        torch.testing.assert_close(gf, gn, rtol=1e-12, atol=1e-12)
    assert grads_fused[0][1, 4:].abs().max() == 0  # no gradient reaches padding


_MEMORY_SCRIPT = textwrap.dedent("""
    import gc, json, torch
    from lr_opensearch.model import naive_projection_max, projection_max
    torch.set_num_threads(1)
    B, T, H, V = 4, 256, 64, 50_000
    g = torch.Generator().manual_seed(0)
    h = torch.randn(B, T, H, generator=g, requires_grad=True)
    w = torch.randn(V, H, generator=g, requires_grad=True)
    b = torch.randn(V, generator=g, requires_grad=True)
    mask = torch.ones(B, T, dtype=torch.long); mask[:, 200:] = 0
    up = torch.randn(B, V, generator=g)
    def status_kib(field):
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith(field + ":"))
    def peak_mib(fn):
        h.grad = w.grad = b.grad = None
        gc.collect()
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak RSS (VmHWM) to the current RSS
        before = status_kib("VmRSS")
        (fn(h, mask, w, b) * up).sum().backward()
        return (status_kib("VmHWM") - before) / 1024
    fused = peak_mib(lambda *a: projection_max(*a, chunk=2048))
    naive = peak_mib(naive_projection_max)
    print(json.dumps({"fused": fused, "naive": naive}))
""")


def test_fused_peak_memory_far_below_naive() -> None:
    """B=4, T=256, V=50k: naive holds [B,T,V] logits (+ their gradient), ~200 MiB each.

    Peak RSS (VmHWM, reset through /proc/self/clear_refs) above the RSS before each call,
    forward + backward, in a fresh process whose allocator returns freed blocks at once.
    """
    # A fixed mmap threshold makes glibc map every large block on its own and unmap it when
    # freed; its default (a threshold that grows after the first free) serves later blocks
    # from the heap, where fragmentation inflated the fused peak from 49 to 99 MiB on one run.
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072", MALLOC_ARENA_MAX="1")
    proc = subprocess.run([sys.executable, "-c", _MEMORY_SCRIPT], capture_output=True,
                          text=True, timeout=300, check=True, env=env)
    peaks = json.loads(proc.stdout.strip().splitlines()[-1])
    fused, naive = peaks["fused"], peaks["naive"]
    print(f"\npeak memory above inputs, forward+backward: fused {fused:.1f} MiB, "
          f"naive {naive:.1f} MiB, ratio {naive / max(fused, 1e-3):.1f}x")
    logits_mib = 4 * 256 * 50_000 * 4 / 2**20
    assert naive > logits_mib  # the naive version really materialised the logits
    assert fused < naive / 4, (fused, naive)


@pytest.mark.parametrize("chunk", [1, 4, 37, None])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_inference_path_equals_the_autograd_forward(chunk: int | None, dtype: torch.dtype,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Without gradients ``projection_max`` skips the argmax and the padding mask (the
    exact speed-up of ingest): the same maxima as the autograd forward and the naive
    [B, T, V] version, padding and empty rows included; the autograd Function is not run."""
    from lr_opensearch.model.fused import FusedProjectionMax

    h, mask, w, b = _inputs(dtype, batch=5, length=9, hidden=8, vocab=37)
    mask[3] = 0  # a row without any real token: -inf everywhere, as before
    with torch.no_grad():
        h[1, 4:] = 1e6  # huge values at padding must still be ignored
        h[2, :2] = -1e6
    reference = projection_max(h, mask, w, b, chunk=chunk).detach()  # grad mode: the Function
    naive = naive_projection_max(h, mask, w, b).detach()

    def refuse(*args: object) -> None:
        raise AssertionError("the inference path must not run the autograd Function")

    monkeypatch.setattr(FusedProjectionMax, "apply", refuse)
    for bias in (b, None):
        with torch.inference_mode():
            fast = projection_max(h, mask, w, bias, chunk=chunk)
        expected = reference if bias is not None else naive_projection_max(h, mask, w).detach()
        assert fast.dtype == dtype and fast.shape == (5, 37)
        assert torch.isinf(fast[3]).all() and (fast[3] < 0).all()
        torch.testing.assert_close(fast, expected, rtol=0, atol=1e-6 if dtype == torch.float32 else 1e-12)
    torch.testing.assert_close(reference, naive, rtol=0, atol=1e-5)
    with torch.no_grad():  # no_grad as well as inference_mode
        torch.testing.assert_close(projection_max(h, mask, w, b, chunk=chunk), reference,
                                   rtol=0, atol=1e-5)
