"""The explorer payload: quantisation, summaries, rollout, validation, the page's shell."""

from __future__ import annotations

import base64
import json
import math
import re

import numpy as np
import pytest
import torch
from explorer_examples import seq2seq_example, softmax

from attnkit.visualize.explorer import (
    AttentionGroup,
    ExplorerExample,
    build_payload,
    decode_blob,
    encode_blob,
    render_page,
)
from attnkit.visualize.explorer.summaries import head_summaries, rollout


def _random_maps(rng: np.random.Generator, layers: int, heads: int, tq: int, tk: int) -> list:
    return [softmax(rng.normal(0, 2, (heads, tq, tk))) for _ in range(layers)]


def _self_example(maps: list, n: int, kind: str = "masked_lm") -> ExplorerExample:
    return ExplorerExample(
        kind=kind,
        source=[f"t{i}" for i in range(n)],
        groups=[AttentionGroup("self-attention", maps, query="source", key="source")],
    )


# ---- quantisation


def test_uint8_round_trip_within_half_a_level():
    rng = np.random.default_rng(0)
    w = softmax(rng.normal(0, 3, (3, 5, 40)))
    w[1, 2] = 0.0  # a masked query row: scale 0, all zeros back
    w[2, 0] = np.eye(40)[7]  # one-hot row
    back = decode_blob(encode_blob(w), w.shape)
    assert np.abs(back - w).max() <= 1 / 510 + 1e-7
    assert np.abs(back - w).max() < 1 / 255
    assert (back[1, 2] == 0).all() and back[2, 0, 7] == pytest.approx(1.0)


def test_row_scale_keeps_contrast_of_long_rows():
    w = np.full((1, 1, 512), 1 / 512)
    w[0, 0, :2] = [2 / 512, 0]
    w /= w.sum()
    back = decode_blob(encode_blob(w), w.shape)
    assert np.abs(back - w).max() <= w.max() / 510 + 1e-9  # relative to the row, not to 1


def test_blob_bytes_and_shapes_are_exact():
    rng = np.random.default_rng(1)
    maps = _random_maps(rng, 2, 3, 4, 4)
    payload = build_payload(_self_example(maps, 4))
    g = payload["groups"][0]
    assert (g["layers"], g["heads"], g["shape"]) == (2, 3, [3, 4, 4])
    assert len(g["weights"]) == len(g["average"]) == len(g["rollout"]) == 2
    assert len(base64.b64decode(g["weights"][0]["data"])) == 3 * 4 * 4
    assert len(base64.b64decode(g["weights"][0]["scale"])) == 3 * 4 * 4  # float32 per row
    assert len(base64.b64decode(g["average"][1]["data"])) == 4 * 4
    json.dumps(payload)  # JSON-able


def test_float16_encoding():
    rng = np.random.default_rng(2)
    maps = _random_maps(rng, 1, 2, 3, 5)
    payload = build_payload(_self_example([m[:, :, :3] for m in maps], 3), dtype="float16")
    g = payload["groups"][0]
    assert payload["encoding"]["dtype"] == "float16" and g["weights"][0]["scale"] is None
    back = decode_blob(g["weights"][0], g["shape"], "float16")
    assert np.abs(back - maps[0][:, :, :3]).max() < 1e-3


def test_torch_tensors_are_accepted():
    w = torch.softmax(torch.randn(2, 3, 3), -1).to(torch.bfloat16)
    payload = build_payload(_self_example([w], 3))
    back = decode_blob(payload["groups"][0]["weights"][0], (2, 3, 3))
    assert np.abs(back - w.float().numpy()).max() < 1 / 255


# ---- summaries, by hand


def test_self_attention_summaries_by_hand():
    w = np.array([[[1.0, 0, 0], [0.5, 0.5, 0], [0.25, 0.25, 0.5]]])
    s = head_summaries(w, same_axis=True)
    ln2 = math.log(2)
    assert s["entropy"][0] == pytest.approx((0 + ln2 + (2 * 0.25 * math.log(4) + 0.5 * ln2)) / 3)
    assert s["distance"][0] == pytest.approx((0 + 0.5 + (0.25 * 2 + 0.25 * 1)) / 3)  # 0.41667
    assert s["diagonal"][0] == pytest.approx((1 + 0.5 + 0.5) / 3)
    assert s["first"][0] == pytest.approx((1 + 0.5 + 0.25) / 3)
    # the payload carries the same numbers, rounded to 6 places
    summary = build_payload(_self_example([w], 3))["groups"][0]["summary"]
    assert summary["distance"] == [[0.416667]]
    assert summary["entropy"] == [[round((ln2 + 2 * 0.25 * math.log(4) + 0.5 * ln2) / 3, 6)]]


def test_cross_attention_distance_is_to_the_scaled_diagonal():
    # Tq = 2, Tk = 4: the diagonal passes key coordinates 0.5 and 2.5, cells 1 and 3.
    w = np.array([[[0, 1.0, 0, 0], [0, 0, 0.5, 0.5]]])
    s = head_summaries(w, same_axis=False)
    assert s["distance"][0] == pytest.approx((abs(1 - 0.5) + 0.5 * 0.5 + 0.5 * 0.5) / 2)
    assert s["diagonal"][0] == pytest.approx((1.0 + 0.5) / 2)
    assert s["first"][0] == 0.0
    assert s["entropy"][0] == pytest.approx(math.log(2) / 2)


def test_equal_lengths_cross_attention_matches_self_definitions():
    rng = np.random.default_rng(3)
    w = softmax(rng.normal(0, 1, (2, 5, 5)))
    a, b = head_summaries(w, same_axis=True), head_summaries(w, same_axis=False)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], atol=1e-12)


# ---- head average and rollout


def test_rollout_against_direct_numpy():
    rng = np.random.default_rng(4)
    maps = _random_maps(rng, 3, 4, 6, 6)
    avgs = [m.mean(0) for m in maps]
    mixed = []
    for a in avgs:
        m = 0.5 * a + 0.5 * np.eye(6)
        mixed.append(m / m.sum(-1, keepdims=True))
    expected = [np.linalg.multi_dot(mixed[: i + 1][::-1]) if i else mixed[0] for i in range(3)]
    got = rollout(avgs)
    for e, r in zip(expected, got):
        np.testing.assert_allclose(r, e, atol=1e-12)
        np.testing.assert_allclose(r.sum(-1), 1.0, atol=1e-12)
    g = build_payload(_self_example(maps, 6))["groups"][0]
    for layer in range(3):
        back_roll = decode_blob(g["rollout"][layer], (1, 6, 6))[0]
        back_avg = decode_blob(g["average"][layer], (1, 6, 6))[0]
        assert np.abs(back_roll - expected[layer]).max() < 1 / 255
        assert np.abs(back_avg - avgs[layer]).max() < 1 / 255


def test_rollout_only_for_self_attention_groups():
    payload = build_payload(seq2seq_example())
    rolled = {g["name"]: g["rollout"] is not None for g in payload["groups"]}
    assert rolled == {
        "encoder self-attention": True,
        "decoder self-attention": True,
        "cross-attention": False,
    }
    cross = payload["groups"][2]
    assert (cross["query"], cross["key"], cross["self"]) == ("target", "source", False)
    assert payload["output"] == payload["nbest"][0]["text"]


def test_rnn_one_layer_one_head():
    w = softmax(np.random.default_rng(5).normal(0, 1, (1, 3, 4)))
    ex = ExplorerExample(
        kind="seq2seq",
        source=["a", "b", "c", "</s>"],
        target=["x", "y", "</s>"],
        nbest=[("x y", -0.5)],
        groups=[AttentionGroup("cross-attention", [w])],
    )
    g = build_payload(ex)["groups"][0]
    assert (g["layers"], g["heads"], g["shape"], g["rollout"]) == (1, 1, [1, 3, 4], None)


def test_causal_lm_sequence_axis_is_prompt_plus_continuation():
    w = np.tril(np.ones((5, 5)))
    w = (w / w.sum(-1, keepdims=True))[None]
    ex = ExplorerExample(
        kind="causal_lm",
        source=["a", "b"],
        target=["c", "d", "e"],
        groups=[AttentionGroup("self-attention", [w])],
    )
    g = build_payload(ex)["groups"][0]
    assert (g["query"], g["key"], g["shape"]) == ("sequence", "sequence", [1, 5, 5])
    assert g["summary"]["first"][0][0] == pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 4 + 1 / 5) / 5)


# ---- validation names the field


def _cross(shape=(2, 3, 4)) -> np.ndarray:
    return np.full(shape, 1 / shape[-1])


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"kind": "gpt"}, "kind"),
        ({"source": "a b c d"}, "source"),
        ({"source": []}, "source"),
        ({"source": None}, "source"),
        ({"nbest": [("x", -1.0, "extra")]}, "nbest[0]"),
        ({"target": ["x", 1, "z"]}, "target"),
        ({"groups": []}, "groups"),
        ({"nbest": [("x", "high")]}, "nbest[0]"),
        ({"groups": [AttentionGroup("self-attention", [_cross()])]}, "groups[0].name"),
        ({"groups": [AttentionGroup("cross-attention", [])]}, "groups[0].layers"),
        (
            {"groups": [AttentionGroup("cross-attention", [_cross(), _cross((2, 4, 3))])]},
            "groups[0].layers[1]",
        ),
        (
            {"groups": [AttentionGroup("cross-attention", [_cross(), _cross((3, 3, 4))])]},
            "groups[0].layers[1]",
        ),
        (
            {"groups": [AttentionGroup("cross-attention", [_cross((1, 2, 3, 4))])]},
            "groups[0].layers[0]",
        ),
        (
            {"groups": [AttentionGroup("cross-attention", [_cross() * np.nan])]},
            "groups[0].layers[0]",
        ),
        ({"groups": [AttentionGroup("cross-attention", [_cross() - 0.5])]}, "groups[0].layers[0]"),
        (
            {"groups": [AttentionGroup("cross-attention", [_cross()], query="output")]},
            "groups[0].query",
        ),
        ({"groups": [AttentionGroup("cross-attention", [_cross()])] * 2}, "groups"),
    ],
)
def test_bad_input_names_the_field(change, field):
    base = {
        "kind": "seq2seq",
        "source": ["a", "b", "c", "d"],
        "target": ["x", "y", "z"],
        "groups": [AttentionGroup("cross-attention", [_cross()])],
    }
    with pytest.raises(ValueError, match=rf"^{re.escape(field)}[:. ]"):
        build_payload(ExplorerExample(**(base | change)))


def test_shape_error_says_what_was_expected():
    ex = ExplorerExample(
        kind="seq2seq",
        source=["a", "b", "c", "d"],
        target=["x", "y", "z"],
        groups=[AttentionGroup("cross-attention", [_cross((2, 4, 3))])],
    )
    with pytest.raises(ValueError, match=r"3 target tokens \(query\) x 4 source tokens \(key\)"):
        build_payload(ex)


# ---- the page shell (the browser tests check what it does)


def test_page_is_self_contained_and_payload_survives_embedding():
    ex = seq2seq_example()
    ex.source = ["</script><script>alert(1)</script>", *ex.source[1:]]
    payload = build_payload(ex)
    page = render_page(payload)
    assert "<script src" not in page and "<link" not in page and "@import" not in page
    assert set(re.findall(r"https?://[^\s\"'<>)]+", page)) == {"http://www.w3.org/2000/svg"}
    assert "</script><script>alert" not in page
    m = re.search(r'<script id="attnkit-payload" type="application/json">(.*?)</script>', page)
    assert json.loads(m.group(1)) == payload
    assert "connect-src 'none'" in page  # exported pages may not fetch anything


def test_served_page_allows_only_its_api():
    page = render_page(None, api_url="http://127.0.0.1:8000/translate")
    assert "connect-src 'self' http://127.0.0.1:8000;" in page
    assert '"api_url":"http://127.0.0.1:8000/translate"' in page


def test_render_page_rejects_a_non_payload():
    with pytest.raises(ValueError, match="^payload"):
        render_page({"groups": []})
