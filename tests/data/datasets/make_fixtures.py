"""Write the small dataset and tokenizer fixtures in tests/data/datasets/ (run once; the outputs are committed).

Every prompt is made up here; no file comes from a real dataset. The Hugging Face directory has the
layout `datasets.Dataset.save_to_disk` writes (state.json, dataset_info.json, data-00000-of-00001.arrow as
an Arrow IPC stream), written with pyarrow because the `datasets` package is not a dependency.
"""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
PROMPTS = [f"question {i}: explain the {w} of the system in a few words" for i, w in enumerate(
    ["design", "state", "power", "order", "light", "water", "music", "school", "family", "city", "group", "line"])]
REPLIES = [" ".join(["answer"] * (5 + i)) for i in range(len(PROMPTS))]


def main() -> None:
    sharegpt = [{"id": f"c{i}", "conversations": [{"from": "human", "value": p}, {"from": "gpt", "value": r}]}
                for i, (p, r) in enumerate(zip(PROMPTS, REPLIES))]
    sharegpt.append({"id": "empty", "conversations": []})  # skipped: no human turn
    (HERE / "sharegpt.json").write_text(json.dumps(sharegpt, indent=1) + "\n")
    (HERE / "prompts.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    (HERE / "messages.jsonl").write_text("".join(json.dumps({"messages": [{"role": "system", "content": "be brief"},
                                                                           {"role": "user", "content": p}]}) + "\n" for p in PROMPTS))
    table = pa.table({"id": list(range(len(PROMPTS))), "question": PROMPTS})
    pq.write_table(table, HERE / "prompts.parquet")
    pcsv.write_csv(table, HERE / "prompts.csv")
    d = HERE / "hf_saved"
    d.mkdir(exist_ok=True)
    with pa.OSFile(str(d / "data-00000-of-00001.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    (d / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}], "_fingerprint": "fixture",
                                              "_format_columns": None, "_format_kwargs": {}, "_format_type": None,
                                              "_output_all_columns": False, "_split": "train"}, indent=2) + "\n")
    (d / "dataset_info.json").write_text(json.dumps({"features": {"id": {"dtype": "int64", "_type": "Value"},
                                                                  "question": {"dtype": "string", "_type": "Value"}}}, indent=2) + "\n")
    # a small BPE tokenizer trained on the prompts: tokens are not words, so client counts differ from word counts
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders

    from workloads.prompts import WORDS

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = PROMPTS + REPLIES + [" ".join(WORDS[i:i + 12]) for i in range(0, len(WORDS), 12)]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=["[UNK]"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    (HERE / "tokenizer").mkdir(exist_ok=True)
    tok.save(str(HERE / "tokenizer" / "tokenizer.json"))


if __name__ == "__main__":
    main()
