"""corpus_tools: raw text -> morphemes -> vocab -> NSP/MLM shards (each a stage, each a CLI)."""

from pathlib import Path

SAMPLE_DATA = Path(__file__).resolve().parent / "sample_data"  # the embedded sample (python -m corpus_tools.make_sample): every stage's default input
