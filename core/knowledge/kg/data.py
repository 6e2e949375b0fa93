"""KG training data shared by KIMERA and MoP: entity MLM, relation / triplet / tail-entity classification.

``build_kg_data(source, env, tokenizer, config)`` streams the source once (ids go to disk, only the
entity and relation vocabularies stay in memory), tokenizes each distinct entity and relation text once
(batched fast tokenizer, optionally several processes), assembles every sequence with vectorised numpy
and writes memory-mapped Arrow files into ``<cache>/kg/<key>/`` where key = hash(source fingerprint +
filters + tokenizer + config). It is written with :func:`kinject.files.atomic_directory`, so a failure (bad
input) leaves no cache behind.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from kinject.api import DataError, Environment, KinjectError, KnowledgeSource, SpecError, atomic_directory
from kinject.knowledge.kg.intern import Vocab, intern_triples
from kinject.knowledge.kg.batching import IGNORE, KGCollator, lengths_of  # noqa: F401 (contract)

FORMAT_VERSION = "2"  # 2: every row names the triple it states ("triple"; -1: a corrupted negative)
TASKS = ("entity", "relation", "triplet", "tail")


class KGDataConfig(BaseModel):
    """Which KG training sets to build and how long their parts may be."""

    model_config = ConfigDict(extra="forbid", validate_default=True)
    tasks: list[Literal["entity", "relation", "triplet", "tail"]] = Field(
        list(TASKS), description="Training sets to build.")
    max_node_tokens: int = Field(100, ge=1, description="Subword cap per entity text (KIMERA: 100).")
    max_relation_tokens: int = Field(10, ge=1, description="Subword cap per relation text (KIMERA: 10).")
    max_length: int = Field(128, ge=8, description="Cap per sequence; entity caps shrink to fit it.")
    negatives_seed: int = Field(0, description="Seed for triplet-classification negatives.")
    num_proc: int = Field(1, ge=1, description="Processes for tokenizing entity texts (datasets.map).")
    chunk_size: int = Field(200_000, ge=1, description="Triples assembled per vectorised chunk.")
    max_triples: int | None = Field(None, ge=1, description="Use at most N triples (smoke runs).")


@dataclass
class KGData:
    """Tokenized, memory-mapped KG training sets plus the entity and relation vocabularies."""

    path: Path
    entities: list[str]
    relations: list[str]
    triples: Any  # datasets.Dataset: head, relation, tail ids (int32) and weight
    entity: Any = None
    relation: Any = None
    triplet: Any = None
    tail: Any = None
    stats: dict = field(default_factory=dict)
    cached: bool = False


def tokenizer_fingerprint(tokenizer) -> str:
    """Hash of the tokenizer's vocabulary and rules (not its transient truncation/padding state)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        state = json.loads(backend.to_str())
        state.pop("truncation", None)
        state.pop("padding", None)
        text = json.dumps(state, sort_keys=True)
    else:
        text = json.dumps([getattr(tokenizer, "name_or_path", ""), len(tokenizer)])
    return hashlib.sha256(text.encode()).hexdigest()


def cache_key(source: KnowledgeSource, env: Environment, tokenizer, config: KGDataConfig) -> str:
    data = {"format": FORMAT_VERSION, "source": source.name, "fingerprint": source.fingerprint(env),
            "tokenizer": tokenizer_fingerprint(tokenizer), "config": config.model_dump(mode="json"),
            "limit": env.limit}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


# -- pass 1: intern the triples, ids to disk ---------------------------------------------------- #
def _intern(source: KnowledgeSource, env: Environment, out: Path, cap: int | None):
    vocab = Vocab()
    n = 0
    files = {name: open(out / f"{name}.bin", "wb") for name in "hrtw"}
    try:
        from kinject.tasks import progress

        for chunk in progress(intern_triples(source.iter_triples(env), vocab, cap=cap), "KG rows: reading triples",
                              unit=" chunks"):
            for name, values in zip("hrtw", chunk):
                values.tofile(files[name])
            n += len(chunk[0])
    finally:
        for f in files.values():
            f.close()
    return list(vocab.entities), list(vocab.relations), n


def _tokenize(texts: list[str], tokenizer, cap: int, num_proc: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token ids of every text (no specials, at most ``cap``): flat int32 values, starts, lengths."""
    import pyarrow as pa

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:  # the Rust tokenizer directly: ~3x less overhead than __call__
        from tokenizers import Tokenizer

        backend = Tokenizer.from_str(backend.to_str())
        backend.no_truncation()
        backend.no_padding()

    def encode(batch):
        batch = [text[: cap * 40] for text in batch]  # no entity needs more characters than that
        if backend is None:
            return tokenizer(batch, add_special_tokens=False, truncation=True, max_length=cap)["input_ids"]
        return [e.ids[:cap] for e in backend.encode_batch_fast(batch, add_special_tokens=False)]

    if num_proc > 1 and len(texts) >= 20_000:
        from datasets import Dataset

        ds = Dataset.from_dict({"text": texts}).map(lambda b: {"ids": encode(b["text"])}, batched=True,
                                                    batch_size=2000, num_proc=num_proc, remove_columns=["text"])
        column = ds.data.column("ids").combine_chunks()
    else:
        chunks = [pa.array(encode(texts[i:i + 20_000]), type=pa.list_(pa.int32()))
                  for i in range(0, len(texts), 20_000)]
        column = pa.concat_arrays(chunks) if chunks else pa.array([], type=pa.list_(pa.int32()))
    offsets = np.asarray(column.offsets, dtype=np.int64)
    flat = np.asarray(column.values.cast(pa.int32()), dtype=np.int32)
    starts = offsets[:-1] - offsets[0]
    lengths = np.diff(offsets)
    return flat[offsets[0]:offsets[-1]], starts, lengths


# -- vectorised sequence assembly ---------------------------------------------------------------- #
def _within(lengths: np.ndarray) -> np.ndarray:
    ends = np.cumsum(lengths)
    return np.arange(ends[-1] if len(ends) else 0) - np.repeat(ends - lengths, lengths)


def assemble(n: int, segments: list[tuple], mlm: bool):
    """Concatenate segments row-wise. A segment is ('tok', id, type) or ('span', flat, starts, lengths,
    type, masked). Returns (offsets, input_ids, token_type_ids, labels or None, lengths)."""
    seg_lens = [np.ones(n, np.int64) if s[0] == "tok" else s[3] for s in segments]
    total = np.sum(seg_lens, axis=0)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(total, out=offsets[1:])
    ids = np.empty(offsets[-1], np.int32)
    types = np.empty(offsets[-1], np.int8)
    labels = np.full(offsets[-1], IGNORE, np.int32) if mlm else None
    pos = offsets[:-1].copy()
    for seg, lens in zip(segments, seg_lens):
        if seg[0] == "tok":
            ids[pos] = seg[1]
            types[pos] = seg[2]
        else:
            _, flat, starts, _, ttype, masked = seg
            within = _within(lens)
            dst = np.repeat(pos, lens) + within
            values = flat[np.repeat(starts, lens) + within]
            if masked is not None:
                ids[dst] = masked
                labels[dst] = values
            else:
                ids[dst] = values
            types[dst] = ttype
        pos += lens
    return offsets, ids, types, labels, total


def _record_batch(offsets, ids, types, labels, lengths, scalar_labels=None, triples=None):
    import pyarrow as pa

    off = pa.array(offsets.astype(np.int32))
    cols = {"input_ids": pa.ListArray.from_arrays(off, pa.array(ids)),
            "attention_mask": pa.ListArray.from_arrays(off, pa.array(np.ones(len(ids), np.int8))),
            "token_type_ids": pa.ListArray.from_arrays(off, pa.array(types)),
            "labels": (pa.ListArray.from_arrays(off, pa.array(labels)) if labels is not None
                       else pa.array(scalar_labels.astype(np.int64))),
            "length": pa.array(lengths.astype(np.int32)),
            "triple": pa.array(np.asarray(triples, dtype=np.int32))}
    return pa.RecordBatch.from_pydict(cols)


class _Writer:
    def __init__(self, path: Path):
        self.path, self.writer, self.rows = path, None, 0

    def write(self, batch) -> None:
        import pyarrow as pa

        if self.writer is None:
            self.writer = pa.ipc.new_stream(str(self.path), batch.schema)
        self.writer.write_batch(batch)
        self.rows += batch.num_rows

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


# -- negatives ------------------------------------------------------------------------------------ #
def _keys(h, r, t, n_rel: int, n_ent: int) -> np.ndarray:
    # (h * R + r) * E + t in uint64; wraps around for huge graphs (then only a few valid negatives are lost)
    with np.errstate(over="ignore"):
        return (h.astype(np.uint64) * np.uint64(n_rel) + r.astype(np.uint64)) * np.uint64(n_ent) + t.astype(np.uint64)


def corrupt(h, r, t, all_h, all_r, all_t, known: np.ndarray, n_rel: int, n_ent: int, rng, tries: int = 30):
    """One corrupted triple per row (a component replaced by the same component of a random triple),
    never a known triple. Rows without a valid corruption after ``tries`` rounds are dropped."""
    n, total = len(h), len(all_h)
    ch, cr, ct = h.copy(), r.copy(), t.copy()
    todo = np.arange(n)
    ok = np.zeros(n, bool)
    for _ in range(tries):
        if not len(todo):
            break
        comp = rng.integers(0, 3, len(todo))
        j = rng.integers(0, total, len(todo))
        nh, nr, nt = h[todo].copy(), r[todo].copy(), t[todo].copy()
        nh[comp == 0] = all_h[j[comp == 0]]
        nr[comp == 1] = all_r[j[comp == 1]]
        nt[comp == 2] = all_t[j[comp == 2]]
        k = _keys(nh, nr, nt, n_rel, n_ent)
        pos = np.minimum(np.searchsorted(known, k), len(known) - 1)
        good = known[pos] != k
        idx = todo[good]
        ch[idx], cr[idx], ct[idx] = nh[good], nr[good], nt[good]
        ok[idx] = True
        todo = todo[~good]
    return ch[ok], cr[ok], ct[ok]


# -- build ----------------------------------------------------------------------------------------- #
def _special(tokenizer, name: str) -> int:
    value = getattr(tokenizer, f"{name}_token_id", None)
    if value is None:
        raise KinjectError(f"KG data: the tokenizer has no {name} token")
    return int(value)


def build_kg_data(source: KnowledgeSource, env: Environment, tokenizer, config: KGDataConfig | None = None) -> KGData:
    """Build (or load from the cache) the KG training sets of ``source`` for ``tokenizer``."""
    config = config or KGDataConfig()
    key = cache_key(source, env, tokenizer, config)
    folder = Path(env.cache_dir) / "kg" / key[:24]
    if (folder / "meta.json").exists():
        return load_kg_data(folder, cached=True)
    rel_cap = min(config.max_relation_tokens, max(1, config.max_length // 8))
    node_cap = min(config.max_node_tokens, (config.max_length - 4 - rel_cap) // 2)
    if node_cap < 1:
        raise SpecError(f"max_length={config.max_length} leaves no room for entity tokens")
    cls_id, sep_id, mask_id = (_special(tokenizer, n) for n in ("cls", "sep", "mask"))
    with atomic_directory(folder) as tmp:  # another process finishing the same key first wins
        cap = min(x for x in (config.max_triples, env.limit, 2**62) if x is not None)
        entities, relations, n = _intern(source, env, tmp, cap)
        if n == 0:
            raise DataError(f"KG data: source {source.name!r} yielded no triples")
        h, r, t = (np.fromfile(tmp / f"{x}.bin", dtype=np.int32) for x in "hrt")
        w = np.fromfile(tmp / "w.bin", dtype=np.float32)
        e_flat, e_start, e_len = _tokenize(entities, tokenizer, node_cap, config.num_proc)
        r_flat, r_start, r_len = _tokenize(relations, tokenizer, rel_cap, 1)
        e_len = np.maximum(e_len, 0)
        if (e_len == 0).any() or (r_len == 0).any():
            empty = entities[int(np.argmax(e_len == 0))] if (e_len == 0).any() else relations[int(np.argmax(r_len == 0))]
            raise DataError(f"KG data: the tokenizer turns {empty!r} into no tokens")

        def ent(ids, ttype, masked=None):
            return ("span", e_flat, e_start[ids], e_len[ids], ttype, masked)

        def rel(ids):
            return ("span", r_flat, r_start[ids], r_len[ids], 1, None)

        cls, sep = ("tok", cls_id, 0), ("tok", sep_id, 0)
        sep1 = ("tok", sep_id, 1)
        writers = {task: _Writer(tmp / f"{task}.arrow") for task in config.tasks}
        known = np.unique(_keys(h, r, t, len(relations), len(entities))) if "triplet" in config.tasks else None
        rng = np.random.default_rng(config.negatives_seed)
        dropped = 0
        for lo in range(0, n, config.chunk_size):
            ch, cr, ct = h[lo:lo + config.chunk_size], r[lo:lo + config.chunk_size], t[lo:lo + config.chunk_size]
            m = len(ch)
            which = np.arange(lo, lo + m)  # the triple each row states
            if "entity" in writers:  # [CLS] s [SEP] r [SEP] o [SEP], one side masked
                for masked_side in ("tail", "head"):
                    segs = [cls, ent(ch, 0, mask_id if masked_side == "head" else None), sep, rel(cr), sep1,
                            ent(ct, 0, mask_id if masked_side == "tail" else None), sep]
                    writers["entity"].write(_record_batch(*assemble(m, segs, mlm=True), triples=which))
            if "relation" in writers:  # [CLS] s [SEP] o [SEP] -> r
                off, ids, ty, _, ln = assemble(m, [cls, ent(ch, 0), sep, ent(ct, 1), sep1], mlm=False)
                writers["relation"].write(_record_batch(off, ids, ty, None, ln, cr, which))
            if "triplet" in writers:  # valid 1, corrupted 0
                nh, nr, nt = corrupt(ch, cr, ct, h, r, t, known, len(relations), len(entities), rng)
                dropped += m - len(nh)
                for (bh, br, bt), label, of in (((ch, cr, ct), 1, which), ((nh, nr, nt), 0, np.full(len(nh), -1))):
                    if len(bh):
                        off, ids, ty, _, ln = assemble(len(bh), [cls, ent(bh, 0), sep, rel(br), sep1, ent(bt, 0),
                                                                sep], mlm=False)
                        writers["triplet"].write(_record_batch(off, ids, ty, None, ln, np.full(len(bh), label), of))
            if "tail" in writers:  # [CLS] h [SEP] r [SEP] -> tail entity id
                off, ids, ty, _, ln = assemble(m, [cls, ent(ch, 0), sep, rel(cr), sep1], mlm=False)
                writers["tail"].write(_record_batch(off, ids, ty, None, ln, ct, which))
        for wr in writers.values():
            wr.close()
        _write_vocab(tmp, entities, h, r, t, w)
        bad = getattr(source, "bad_rows", None)
        from kinject.api import held_out_count

        held = held_out_count(source)
        stats = {"triples": n, "entities": len(entities), "relations": len(relations),
                 **({"held_out": held} if held is not None else {}),
                 "rows": {task: wr.rows for task, wr in writers.items()},
                 "negatives_dropped": dropped, "bad_rows_skipped": getattr(bad, "count", 0),
                 "node_cap": node_cap, "relation_cap": rel_cap}
        for x in "hrtw":
            (tmp / f"{x}.bin").unlink()
        (tmp / "meta.json").write_text(json.dumps({"key": key, "relations": relations, "stats": stats,
                                                   "tasks": list(config.tasks)}, indent=1))
    return load_kg_data(folder, cached=False)


def _write_vocab(tmp: Path, entities: list[str], h, r, t, w) -> None:
    import pyarrow as pa

    with pa.ipc.new_stream(str(tmp / "entities.arrow"), pa.schema([("text", pa.string())])) as out:
        for i in range(0, len(entities), 500_000):
            out.write_batch(pa.RecordBatch.from_pydict({"text": pa.array(entities[i:i + 500_000], pa.string())}))
    table = pa.table({"head": h, "relation": r, "tail": t, "weight": w})
    with pa.ipc.new_stream(str(tmp / "triples.arrow"), table.schema) as out:
        out.write_table(table, max_chunksize=1_000_000)


def load_kg_data(folder: Path, cached: bool = True) -> KGData:
    """Open a finished KG data folder (memory-mapped)."""
    from datasets import Dataset

    meta = json.loads((folder / "meta.json").read_text())
    entities = Dataset.from_file(str(folder / "entities.arrow")).data.column("text").to_pylist()
    sets = {task: Dataset.from_file(str(folder / f"{task}.arrow")) for task in meta["tasks"]
            if (folder / f"{task}.arrow").exists()}
    return KGData(path=folder, entities=entities, relations=meta["relations"],
                  triples=Dataset.from_file(str(folder / "triples.arrow")), stats=meta["stats"], cached=cached,
                  **sets)


# -- the dose: which facts training rows state -------------------------------------------------------------- #
def triple_keys(data: KGData, triples: np.ndarray | None = None) -> np.ndarray:
    """The fact key (:func:`kinject.api.fact_key`) of each of ``triples`` (ids into ``data.triples``; default: all),
    in their order."""
    from kinject.api import fact_key

    ids = np.arange(len(data.triples)) if triples is None else np.asarray(triples, dtype=np.int64)
    if not len(ids):
        return np.zeros(0, dtype=np.uint64)
    table = data.triples.data
    h, r, t = (table.column(c).to_numpy()[ids] for c in ("head", "relation", "tail"))
    ents, rels = data.entities, data.relations
    return np.fromiter((fact_key(ents[a], rels[b], ents[c]) for a, b, c in zip(h, r, t)), dtype=np.uint64,
                       count=len(ids))


def write_kg_dose(folder: Path, data: KGData, rows: dict[str, np.ndarray], rows_total: int,
                  available: int | None = None, **extra) -> dict:
    """Write the dose of a stage that trained on KG rows: ``rows`` maps a training set of ``data`` (entity, relation,
    triplet, tail) to the row indices consumed (with repeats); ``rows_total`` is one epoch's rows; ``available`` the
    distinct facts the stage trains on (default: every triple of ``data``). Facts seen count the rows that state a
    triple (a corrupted negative states none); distinct facts are the triples they state."""
    from kinject.knowledge.dose import write_dose

    stated, tokens, consumed = [], 0, 0
    for task, indices in rows.items():
        indices = np.asarray(indices, dtype=np.int64)
        if not len(indices):
            continue
        table = getattr(data, task).data
        triple = table.column("triple").to_numpy()[indices]
        tokens += int(table.column("length").to_numpy()[indices].sum())
        consumed += len(indices)
        stated.append(triple[triple >= 0])
    stated_all = np.concatenate(stated) if stated else np.zeros(0, dtype=np.int64)
    covered = triple_keys(data, np.unique(stated_all))
    held = data.stats.get("held_out")
    return write_dose(folder, unit="triples", covered=covered, seen=len(stated_all), rows_seen=consumed,
                      rows_total=rows_total, available=available if available is not None
                      else len(np.unique(triple_keys(data))), tokens=tokens,
                      held_out=held, **extra)
