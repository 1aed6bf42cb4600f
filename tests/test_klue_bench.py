"""benchmarks/klue_cpu.py's result file: rows of several runs merged, each with the command and load it ran under."""

from conftest import load_benchmark


def _row(kind, who, seed, task="klue-ner", fresh=True, f1=50.0, key="k1", **more):
    return {"kind": kind, "model": f"runs/{kind}", "model_key": key, "row": who, "seed": seed, "task": task, "metrics": {"entity_f1": f1},
            "seconds": 10.0, "fresh": fresh, **more}


def _ran(row, command, load):
    return {**{k: v for k, v in row.items() if k != "fresh"}, "command": command, "load_average_start_end": load}


def test_a_reused_result_keeps_the_command_and_load_it_ran_under():
    kc = load_benchmark("klue_cpu")
    first = {"rows": [_ran(_row("a", "model", 42), "first", [[0.1]]), _ran(_row("a", "model", 42, task="klue-nli"), "first", [[0.1]]),
                      _ran(_row("a", "model", 42, task="klue-sts"), "first", [[0.1]])]}
    rows = [_row("a", "model", 42, fresh=False), _row("a", "model", 43), _row("a", "model", 42, task="klue-sts", f1=60.0),
            _row("b", "model", 42, fresh=False)]
    merged = kc.merge_rows(first, rows, "second", [[2.0]])
    by = {(r["kind"], r["seed"], r["task"]): (r["command"], r["load_average_start_end"]) for r in merged}
    assert [(r["kind"], r["seed"], r["task"]) for r in merged] == [("a", 42, "klue-ner"), ("a", 42, "klue-nli"), ("a", 42, "klue-sts"),
                                                                   ("a", 43, "klue-ner"), ("b", 42, "klue-ner")]  # (redone rows keep their place)
    assert by[("a", 42, "klue-ner")] == ("first", [[0.1]])  # reused: the run it came from
    assert by[("a", 42, "klue-nli")] == ("first", [[0.1]])  # not redone: as it was
    assert by[("a", 42, "klue-sts")] == ("second", [[2.0]])  # redone: this run's
    assert merged[2]["metrics"] == {"entity_f1": 60.0}
    assert by[("a", 43, "klue-ner")] == ("second", [[2.0]])
    assert by[("b", 42, "klue-ner")] == ("second", [[2.0]])  # reused, but from a run that never wrote this file
    assert not any("fresh" in r for r in merged)


def test_a_reused_result_the_file_does_not_hold_takes_this_runs_command():
    """A run killed after its fine-tuning and before it wrote the file: the next run reuses the cached result,
    which is not the row the file holds (another model key, or other metrics)."""
    kc = load_benchmark("klue_cpu")
    first = {"rows": [_ran(_row("a", "model", 42, f1=40.0), "first", [[0.1]])]}
    merged = kc.merge_rows(first, [_row("a", "model", 42, fresh=False)], "second", [[2.0]])
    assert [(r["command"], r["metrics"]["entity_f1"]) for r in merged] == [("second", 50.0)]


def test_a_retrained_model_drops_its_earlier_rows_and_an_old_file_names_its_command_once():
    kc = load_benchmark("klue_cpu")
    old_style = {k: v for k, v in _ran(_row("a", "model", 42, task="klue-nli"), "", None).items() if k not in ("command", "load_average_start_end")}
    first = {"command": "file-level", "load_average_start_end": [[0.5]],
             "rows": [_ran(_row("a", "model", 42), "first", [[0.1]]), old_style, _ran(_row("c", "model", 42), "first", [[0.1]])]}
    merged = kc.merge_rows(first, [_row("a", "model", 42, key="k2", fresh=False)], "second", [[2.0]])
    assert [(r["kind"], r["task"], r["command"]) for r in merged] == [("c", "klue-ner", "first"), ("a", "klue-ner", "second")]
    kept = kc.merge_rows(first, [_row("c", "model", 43)], "second", [[2.0]])  # model a untouched: its old-format row names the file's command
    assert [(r["kind"], r["task"], r["command"]) for r in kept][:3] == [("a", "klue-ner", "first"), ("a", "klue-nli", "file-level"), ("c", "klue-ner", "first")]


def test_a_row_from_before_model_keys_is_matched_by_its_result():
    kc = load_benchmark("klue_cpu")
    legacy = {k: v for k, v in _ran(_row("a", "model", 42), "first", [[0.1]]).items() if k != "model_key"}
    merged = kc.merge_rows({"rows": [legacy]}, [_row("a", "model", 42, fresh=False)], "second", [[2.0]])
    assert [(r["command"], r["model_key"]) for r in merged] == [("first", "k1")]
