"""The block-masked query forward equals independent per-token passes; so does the table."""

from __future__ import annotations

import pytest
import torch
from model_fixtures import one_thread, query_tokens, tiny_bert, tiny_llama  # noqa: F401

from lr_opensearch.errors import ConfigError, QueryError
from lr_opensearch.model import LightRetrieverModel, RetrieverSettings, instruction_ids
from lr_opensearch.model.packing import pack_blocks

pytestmark = pytest.mark.usefixtures("one_thread")

INSTRUCTION = "Instruct: find passages about the query\nQuery: "
QUERIES = ["boundary layer heat transfer", "Paris", "the tower the tower"]

MODELS = {
    "llama-last": lambda: tiny_llama(),
    "llama-mean": lambda: tiny_llama(pooling="mean"),
    "bert-mlm-cls": lambda: tiny_bert(),
    "bert-tied-mean-normalized": lambda: tiny_bert(architecture="BertModel", pooling="mean",
                                                   normalize=True),
}


def _independent(model: LightRetrieverModel, instr: list[int], token: int) -> torch.Tensor:
    """Dense vector of ONE independent document pass over framing(instruction + token)."""
    ids, _ = model.framing.frame([*instr, token])
    x = torch.tensor([ids])
    return model.encode_documents(x, torch.ones_like(x)).dense[0]


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("with_instruction", [True, False])
def test_block_masked_pass_equals_independent_passes(name: str, with_instruction: bool) -> None:
    model, tok = MODELS[name]()
    instr = instruction_ids(tok, INSTRUCTION if with_instruction else "")
    queries = query_tokens(tok, QUERIES)
    assert all(queries) and len(queries[0]) > 2
    with torch.no_grad():
        packed = model.encode_query_dense(instr, queries)
        expected = torch.stack([
            torch.stack([_independent(model, instr, t) for t in q]).mean(0) for q in queries])
    diff = (packed - expected).abs().max().item()
    print(f"\n{name} instruction={with_instruction}: max |packed - independent| = {diff:.2e}")
    assert packed.shape == (len(QUERIES), model.hidden_size)
    assert diff < 1e-5


def test_each_token_vector_matches_and_tokens_do_not_see_each_other() -> None:
    model, tok = tiny_llama()
    instr = instruction_ids(tok, INSTRUCTION)
    tokens = query_tokens(tok, ["boundary layer heat transfer"])[0]
    with torch.no_grad():
        per_token = model.encode_token_blocks(instr, [tokens])[0]
        alone = model.encode_token_blocks(instr, [[tokens[-1]]])[0, 0]
    for k, t in enumerate(tokens):
        torch.testing.assert_close(per_token[k], _independent(model, instr, t), rtol=0, atol=1e-5)
    torch.testing.assert_close(per_token[-1], alone, rtol=0, atol=1e-5)


def test_training_mode_query_forward_has_gradients() -> None:
    model, tok = tiny_bert()
    model.train()
    out = model.encode_query_dense(instruction_ids(tok, INSTRUCTION), query_tokens(tok, QUERIES))
    out.pow(2).sum().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


def test_empty_query_is_an_error() -> None:
    model, _ = tiny_llama()
    with pytest.raises(QueryError, match="query 1"):
        model.encode_query_dense([], [[5, 6], []])


def test_pack_mask_layout() -> None:
    packed = pack_blocks([7, 8], [[[1], [2, 3]], [[4]]], causal=True)
    allowed = packed.attention_mask[0, 0] == 0
    # rows: prompt 7, 8 | block [1] | block [2, 3]
    expected = torch.tensor([
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],
        [1, 1, 0, 1, 0],
        [1, 1, 0, 1, 1],
    ], dtype=torch.bool)
    assert torch.equal(allowed, expected)
    assert packed.position_ids[0].tolist() == [0, 1, 2, 2, 3]
    assert packed.input_ids[1].tolist() == [7, 8, 4, 0, 0]
    assert packed.block_count.tolist() == [2, 1]
    assert packed.visible[1, 1].sum() == 0  # the padding block sees nothing
    pad_rows = packed.attention_mask[1, 0, 3:] == 0
    assert torch.equal(pad_rows, torch.eye(5, dtype=torch.bool)[3:])  # no fully masked row


@pytest.mark.parametrize("name", ["llama-last", "bert-mlm-cls", "bert-tied-mean-normalized"])
def test_token_table_rows_equal_independent_forward(name: str) -> None:
    model, tok = MODELS[name]()
    instr = instruction_ids(tok, INSTRUCTION)
    vocab = tok.get_vocab_size()
    table = model.token_table(instr, vocab, batch_size=48, tokens_per_sequence=16, progress=False)
    assert table.shape == (vocab, model.hidden_size) and table.dtype == torch.float32
    with torch.no_grad():
        for t in (0, 1, 17, vocab // 2, vocab - 1):
            torch.testing.assert_close(table[t], _independent(model, instr, t), rtol=0, atol=1e-5)
        # the query forward is the mean of the table rows of its tokens, repeats counted
        queries = query_tokens(tok, QUERIES)
        dense = model.encode_query_dense(instr, queries)
    for q, vec in zip(queries, dense, strict=True):
        torch.testing.assert_close(vec, table[q].mean(0), rtol=0, atol=1e-5)


def test_token_table_packing_does_not_change_rows() -> None:
    model, tok = tiny_llama()
    instr = instruction_ids(tok, INSTRUCTION)
    one = model.token_table(instr, 40, batch_size=16, tokens_per_sequence=1, progress=False)
    many = model.token_table(instr, 40, batch_size=32, tokens_per_sequence=32, progress=False)
    torch.testing.assert_close(one, many, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["llama-last", "bert-mlm-cls"])
def test_control_without_the_block_mask_the_vectors_differ(name: str) -> None:
    """The equality above has teeth: with a plain (causal / full) mask it fails clearly."""
    model, tok = MODELS[name]()
    instr = instruction_ids(tok, INSTRUCTION)
    tokens = query_tokens(tok, ["boundary layer heat transfer"])[0]
    shared, head, tail = model.query_layout(instr)
    packed = pack_blocks(shared, [[[*head, t, *tail] for t in tokens]], causal=model.kind == "decoder")
    length = packed.input_ids.shape[1]
    plain = torch.zeros(1, 1, length, length)
    if model.kind == "decoder":
        plain = plain.masked_fill(~torch.ones(length, length, dtype=torch.bool).tril(), float("-inf"))
    with torch.no_grad():
        hidden = model.body(packed.input_ids, plain, packed.position_ids)
        wrong = model._finish(model.pool(hidden, packed.visible))[0]
        right = torch.stack([_independent(model, instr, t) for t in tokens])
    diff = (wrong[1:] - right[1:]).abs().max().item()
    print(f"\n{name}: without the block mask max |diff| = {diff:.2e}")
    assert diff > 1e-2


def test_query_norm_rows_or_mean_pins_where_the_light_query_is_normalised() -> None:
    import torch.nn.functional as F  # noqa: N812

    rows_model, tok = tiny_bert(architecture="BertModel", pooling="mean", normalize=True)
    mean_model = LightRetrieverModel.create(
        rows_model.hf, framing=rows_model.framing,
        settings=RetrieverSettings(kind="encoder", pooling="mean", normalize=True,
                                   query_norm="mean"))
    rows_model.eval(), mean_model.eval()
    queries = [[5, 9, 9, 31], [40]]
    with torch.no_grad():
        rows_table = rows_model.token_table([], 64, progress=False)
        mean_table = mean_model.token_table([], 64, progress=False)
        torch.testing.assert_close(rows_table.norm(dim=-1), torch.ones(64))  # unit rows
        assert (mean_table.norm(dim=-1) - 1).abs().max() > 1e-3  # raw rows carry a norm
        torch.testing.assert_close(F.normalize(mean_table, dim=-1), rows_table, rtol=1e-4, atol=1e-5)
        for model, table in ((rows_model, rows_table), (mean_model, mean_table)):
            q = model.encode_query_dense([], queries)
            means = torch.stack([table[ids].mean(0) for ids in queries])
            expected = F.normalize(means, dim=-1) if model.query_norm == "mean" else means
            torch.testing.assert_close(q, expected, rtol=1e-4, atol=1e-5)
    with pytest.raises(ConfigError, match="query_norm"):
        RetrieverSettings(kind="encoder", pooling="mean", query_norm="tokens")
