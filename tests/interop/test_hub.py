"""Models by name from a stand-in Hugging Face Hub (``attnkit.interop.hub.client``).

The stand-in (``hub_server.py``) speaks what the installed ``huggingface_hub``
asks for; ``attnkit`` runs in subprocesses with ``HF_ENDPOINT`` pointing at it and
``HF_HOME`` in a temporary folder (``hub_helpers.py``). Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from gguf_helpers import hf_weights, metadata, to_gguf, write_gguf
from hub_helpers import hub_env, last_line, minilm_files, run_attnkit, tiny_repos
from hub_server import Hub, Repo

from attnkit.interop.import_writer import read_import_record

TOKEN = "hf_stand_in_token"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """The stand-in Hub with the tiny models, MiniLM, a pinned repo, a pickle-only
    repo, a private one (``TOKEN``) and a gated one."""
    root = tmp_path_factory.mktemp("hub_repos")
    with Hub() as hub:
        for name, files in tiny_repos(root).items():
            hub.repos[name] = Repo()
            hub.repos[name].add(files)
        hub.repos["sentence-transformers/all-MiniLM-L6-v2"] = Repo()
        hub.repos["sentence-transformers/all-MiniLM-L6-v2"].add(minilm_files())
        gpt2 = hub.repos["tiny/gpt2"].commits[hub.repos["tiny/gpt2"].refs["main"]]
        llama = hub.repos["tiny/llama"].commits[hub.repos["tiny/llama"].refs["main"]]
        pinned = hub.repos["tiny/pinned"] = Repo()
        pinned.add(gpt2, ref="v1")  # v1: a GPT-2; main, later: a Llama
        pinned.add(llama, ref="main")
        pickles = {"config.json": gpt2["config.json"], "pytorch_model.bin": b"x", "model.pt": b"x"}
        hub.repos["tiny/pickles"] = Repo()
        hub.repos["tiny/pickles"].add(pickles)
        hub.repos["tiny/private"] = Repo(token=TOKEN)
        hub.repos["tiny/private"].add(gpt2)
        hub.repos["tiny/gated"] = Repo(gated=True)
        hub.repos["tiny/gated"].add(gpt2)
        gguf = write_gguf(root / "tiny.gguf", to_gguf(hf_weights()), metadata())
        hub.repos["tiny/llama-gguf"] = Repo()  # two files: only the one named is fetched
        hub.repos["tiny/llama-gguf"].add({"tiny-f32.gguf": gguf, "other.gguf": gguf,
                                          "README.md": b"# GGUF"})  # fmt: skip
        yield hub


@pytest.fixture
def env(hub, tmp_path):
    hub.log.clear()
    hub.drop = None
    return hub_env(hub.url, tmp_path)


def sha256(content: bytes | Path) -> str:
    data = content.read_bytes() if isinstance(content, Path) else content
    return hashlib.sha256(data).hexdigest()


def test_models_by_name_download_and_import(hub, env, tmp_path):
    names = ["tiny/bert", "tiny/marian", "tiny/gpt2", "tiny/llama"]
    calls = [["import", "--from", "hf", n, "--out", str(tmp_path / n)] for n in names]
    gguf = ["import", "--from", "gguf", "tiny/llama-gguf:tiny-f32.gguf", "--out",
            str(tmp_path / "gguf")]  # fmt: skip
    results = run_attnkit(env, [*calls, gguf], tmp_path)
    assert [code for code, _ in results] == [0] * 5, results
    record = read_import_record(tmp_path / "gguf")
    assert record["format"] == "gguf" and record["hub"]["repo"] == "tiny/llama-gguf"
    gguf_repo = hub.repos["tiny/llama-gguf"]
    gguf_file = gguf_repo.commits[gguf_repo.refs["main"]]["tiny-f32.gguf"]
    assert record["hub"]["files"] == {"tiny-f32.gguf": sha256(gguf_file)}
    assert "Fetching" in results[0][1]  # huggingface_hub's progress bar
    for name in names:
        repo = hub.repos[name]
        record = read_import_record(tmp_path / name)
        assert record["hub"]["repo"] == name
        assert record["hub"]["commit"] == repo.refs["main"]
        files = repo.commits[repo.refs["main"]]
        assert record["hub"]["files"] == {f: sha256(files[f]) for f in record["hub"]["files"]}
        assert {"config.json", "model.safetensors"} <= set(record["hub"]["files"])
    assert {read_import_record(tmp_path / n)["family"] for n in names} == {
        "encoder_only", "transformer", "decoder_only"}  # fmt: skip
    fetched = {path.rsplit("/", 1)[1] for path in hub.file_gets()}
    assert fetched <= {"config.json", "model.safetensors", "tokenizer.json",
                       "tokenizer_config.json", "tiny-f32.gguf"}, fetched  # fmt: skip
    assert not any(p.name.endswith(".bin") for p in (tmp_path / "hf_home").rglob("*"))


def test_hf_checkpoints_are_imported_once_then_reused_also_offline(hub, env, tmp_path):
    generate = ["generate", "--checkpoint", "hf:tiny/gpt2", "--prompt", "the quick",
                "--max-new-tokens", "3", "--seed", "0"]  # fmt: skip
    first, second = run_attnkit(env, [generate, generate], tmp_path)
    assert first[0] == 0 and second[0] == 0, (first, second)
    assert "importing tiny/gpt2" in first[1] and "importing" not in second[1]
    gets = hub.file_gets()
    assert len(gets) == len(set(gets)) >= 3  # each file once: the second run fetched none
    cached = list((tmp_path / "attnkit_cache" / "hub" / "tiny--gpt2").iterdir())
    commit = hub.repos["tiny/gpt2"].refs["main"]
    assert [p.name for p in cached if not p.name.startswith(".")] == [commit]

    hub.log.clear()
    offline = {**env, "HF_HUB_OFFLINE": "1"}
    calls = [generate, ["import", "--from", "hf", "tiny/gpt2", "--out", str(tmp_path / "again")],
             ["generate", "--checkpoint", "hf:tiny/llama", "--prompt", "a"]]  # fmt: skip
    reused, imported, missing = run_attnkit(offline, calls, tmp_path)
    assert reused[0] == 0 and imported[0] == 0, (reused, imported)
    assert read_import_record(tmp_path / "again")["hub"]["commit"] == commit
    assert missing[0] == 1
    line = last_line(missing[1])
    assert line.startswith("attnkit generate: error: tiny/llama") and "HF_HUB_OFFLINE" in line
    assert hub.log == []  # offline: not one request


def test_revision_pinning(hub, env, tmp_path):
    pinned = hub.repos["tiny/pinned"]
    v1, main = pinned.refs["v1"], pinned.refs["main"]
    calls = [["import", "--from", "hf", f"tiny/pinned{rev}", "--out", str(tmp_path / str(i))]
             for i, rev in enumerate(["@v1", f"@{v1}", "", "@nope"])]  # fmt: skip
    results = run_attnkit(env, calls, tmp_path)
    assert [code for code, _ in results] == [0, 0, 0, 1], results
    records = [read_import_record(tmp_path / str(i)) for i in range(3)]
    assert [r["hub"]["commit"] for r in records] == [v1, v1, main]
    assert [r["model_type"] for r in records] == ["gpt2", "gpt2", "llama"]
    assert records[0]["hub"]["revision"] == "v1"
    assert last_line(results[3][1]) == (
        f"attnkit import: error: tiny/pinned@nope ({hub.url}): no revision 'nope' in "
        "tiny/pinned (a branch, tag or commit)"
    )


def test_refusals_are_one_line(hub, env, tmp_path):
    out = ["--out", str(tmp_path / "out")]
    calls = [["import", "--from", "hf", "tiny/pickles", *out],
             ["import", "--from", "hf", "tiny/absent", *out],
             ["import", "--from", "hf", "tiny/private", *out],
             ["import", "--from", "hf", "tiny/gated", *out],
             ["import", "--from", "gguf", "tiny/gpt2:model.gguf", *out]]  # fmt: skip
    results = run_attnkit({**env, "HF_TOKEN": "hf_another_token"}, calls, tmp_path)
    assert [code for code, _ in results] == [1] * 5, results
    lines = [last_line(err) for _, err in results]
    assert lines[0].startswith("attnkit import: error: tiny/pickles@") and (
        "holds only pickled weights (model.pt, pytorch_model.bin)" in lines[0])  # fmt: skip
    assert "no model repository 'tiny/absent' on the Hub (check the name)" in lines[1]
    assert "private or gated: set HF_TOKEN" in lines[2]
    assert "a gated repository: accept its terms" in lines[3] and "HF_TOKEN" in lines[3]
    assert "no file 'model.gguf'; it has no .gguf file" in lines[4]
    assert hub.file_gets() == [] and not (tmp_path / "out").exists()
    # the token that opens the private repository, through HF_TOKEN as users set it
    [(code, err)] = run_attnkit({**env, "HF_TOKEN": TOKEN}, calls[2:3], tmp_path)
    assert code == 0, err
    assert read_import_record(tmp_path / "out")["hub"]["repo"] == "tiny/private"


@pytest.mark.slow
def test_an_interrupted_download_resumes_or_fails_cleanly(hub, env, tmp_path):
    hub.drop = ("model.safetensors", 1, 1000)  # the connection drops once, after 1000 bytes
    [(code, err)] = run_attnkit(env, [["import", "--from", "hf", "tiny/llama", "--out",
                                       str(tmp_path / "resumed")]], tmp_path)  # fmt: skip
    assert code == 0, err
    ranges = [r for m, p, r in hub.log if m == "GET" and p.endswith("model.safetensors")]
    # asked again from the start: huggingface_hub writes in 10 MiB chunks, so it had
    # kept nothing of this small file (MiniLM's resumes with a Range: the slow test below)
    assert ranges == [None, None]
    files = hub.repos["tiny/llama"].commits[hub.repos["tiny/llama"].refs["main"]]
    record = read_import_record(tmp_path / "resumed")["hub"]
    assert record["files"]["model.safetensors"] == sha256(files["model.safetensors"])

    hub.drop = ("model.safetensors", 100, 0)  # every attempt fails
    no_wait = {**env, "HUB_TEST_NO_SLEEP": "1", "HF_HOME": str(tmp_path / "other_home")}
    [(code, err)] = run_attnkit(no_wait, [["import", "--from", "hf", "tiny/llama", "--out",
                                           str(tmp_path / "failed")]], tmp_path)  # fmt: skip
    assert code == 1
    line = last_line(err)
    assert line.startswith("attnkit import: error: tiny/llama") and "interrupted" in line
    assert "run the command again" in line
    assert not (tmp_path / "failed").exists()
    blobs = list((tmp_path / "other_home").rglob("blobs/*"))
    assert blobs and not any(b.name.endswith(".incomplete") for b in blobs)
    assert sha256(files["model.safetensors"]) not in {b.name for b in blobs}


@pytest.mark.slow
def test_train_init_from_a_hub_name_in_one_command(hub, env, tmp_path):
    """``attnkit train --config sst2_minilm --init hf:sentence-transformers/all-MiniLM-L6-v2``:
    MiniLM's real files, fetched, imported into the cache and fine-tuned for a few steps."""
    data = tmp_path / "sst2"
    data.mkdir()
    rows = ["label\tsentence", *[f"{i % 2}\t{'a fine film' if i % 2 else 'a dull film'} {i}"
                                 for i in range(40)]]  # fmt: skip
    for split in ("train.tsv", "dev.tsv"):
        (data / split).write_text("\n".join(rows) + "\n", encoding="utf-8")
    out = tmp_path / "run"
    hub.drop = ("model.safetensors", 1, 12 << 20)  # dropped once, 12 MiB into 87 MiB
    train = ["train", "--config", "sst2_minilm",
             "--init", "hf:sentence-transformers/all-MiniLM-L6-v2", "--out", str(out),
             "--set", f"data.dir={data}", "--set", "train.max_steps=2",
             "--set", "train.batch_size=4", "--set", "train.max_minutes=5",
             "--no-progress"]  # fmt: skip
    [(code, err)] = run_attnkit(env, [train], tmp_path)
    assert code == 0, err
    ranges = [r for m, p, r in hub.log if m == "GET" and p.endswith("model.safetensors")]
    assert ranges == [None, f"bytes={10 << 20}-"]  # resumed after the chunk it had written
    repo = hub.repos["sentence-transformers/all-MiniLM-L6-v2"]
    commit = repo.refs["main"]
    run = json.loads((out / "run.json").read_text())
    assert run["init"]["path"] == f"hf:sentence-transformers/all-MiniLM-L6-v2@{commit}"
    assert run["attnkit"]  # the version that wrote it
    cached = Path(run["init"]["checkpoint"]).parents[1]
    record = read_import_record(cached)["hub"]
    weights = repo.commits[commit]["model.safetensors"]
    assert record["commit"] == commit
    assert record["files"]["model.safetensors"] == sha256(weights)
    assert sorted(record["files"]) == ["config.json", "model.safetensors", "tokenizer.json",
                                       "tokenizer_config.json"]  # fmt: skip
