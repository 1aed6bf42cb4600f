"""Attention views: every layer x head of one input, as a PNG grid, a self-contained HTML page and JSON.

    korbert attention runs/demo/pretrain/final "나는 학교에 갔다" ["문장 B"] --out attention/

writes attention/attention.png (rows: layers, columns: heads; each cell a T x T map, queries on
the y axis, keys on the x axis, tokens as labels), attention/attention.html (one page, no network:
choose a layer and a head, or the heads' mean) and attention/attention.json (the probabilities,
shape (layers, heads, T, T), with the tokens and their offsets). A label is the token's piece with
"▁" shown as "_" (few fonts draw U+2581).

Hangul labels need a font with Hangul glyphs; `hangul_font()` takes, in order: --font / the
KORBERT_FONT environment variable, an installed font that has them (any matplotlib knows), the
NanumGothic that the `koreanize-matplotlib` package ships (a korbert dependency). It fails with a
message rather than drawing empty boxes.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path

import numpy as np

_KNOWN = ("NanumGothic", "NanumBarunGothic", "Noto Sans CJK KR", "Noto Sans KR", "Malgun Gothic", "AppleGothic", "Apple SD Gothic Neo", "UnDotum", "Baekmuk Gulim")


def missing_glyphs(path: str, text: str) -> set[str]:
    """The characters of `text` (whitespace aside) that the font at `path` has no glyph for."""
    from matplotlib.ft2font import FT2Font

    cmap = FT2Font(path).get_charmap()
    return {c for c in text if not c.isspace() and ord(c) not in cmap}


def _has_hangul(path: str) -> bool:
    try:
        return not missing_glyphs(path, "한국어가힣")
    except (OSError, RuntimeError, ValueError):
        return False


def hangul_font(explicit: str | None = None) -> str:
    """Path of a font file that draws Hangul (see the module docstring for the order)."""
    explicit = explicit or os.environ.get("KORBERT_FONT")
    if explicit:
        if not Path(explicit).is_file() or not _has_hangul(explicit):
            raise RuntimeError(f"font {explicit}: not a font file with Hangul glyphs")
        return explicit
    from matplotlib import font_manager

    fonts = sorted(font_manager.fontManager.ttflist, key=lambda f: (f.name not in _KNOWN, f.name))
    for f in fonts:
        if f.name in _KNOWN and _has_hangul(f.fname):
            return f.fname
    import importlib.util

    spec = importlib.util.find_spec("koreanize_matplotlib")  # found, not imported: it would restyle every plot
    if spec and spec.origin:
        bundled = Path(spec.origin).parent / "fonts" / "NanumGothic.ttf"
        if bundled.is_file() and _has_hangul(str(bundled)):
            return str(bundled)
    raise RuntimeError(
        "no font with Hangul glyphs found: `pip install koreanize-matplotlib` (ships NanumGothic), install one "
        "(e.g. fonts-nanum), or pass --font /path/to/font.ttf (or set KORBERT_FONT)"
    )


def attention(enc, text: str, pair: str | None = None) -> dict:
    """One input through the model -> {"tokens", "labels", "offsets", "segments", "attention": (L, H, T, T) float32}.
    `enc` must be an `Encoder(..., attention=True)` (eager attention returns the probabilities)."""
    b, inputs = enc.batch([text], [pair] if pair is not None else None, offsets=True)
    out = enc.hidden_states(inputs, attentions=True)
    if not out.attentions or out.attentions[0] is None:
        raise RuntimeError("the model returned no attention probabilities (load it with Encoder(..., attention=True))")
    att = np.stack([a[0].float().cpu().numpy() for a in out.attentions])  # (L, H, T, T)
    tokens = enc.tok.convert_ids_to_tokens(b["input_ids"][0])
    return {
        "text": text, "pair": pair, "tokens": tokens, "labels": [t.replace("▁", "_") for t in tokens],
        "offsets": [list(o) for o in b["offset_mapping"][0]], "segments": b.sequence_ids(0), "attention": att,
    }


def draw_png(view: dict, path: Path, font: str) -> Path:
    """The grid: one T x T heat map per layer (rows) and head (columns), token labels on the outer axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import font_manager

    prop = font_manager.FontProperties(fname=font)
    att, labels = view["attention"], view["labels"]
    L, H, T, _ = att.shape
    cell = max(2.2, 0.2 * T + 0.6)
    size = max(6.0, min(11.0, 170.0 / max(T, 1)))
    fig, axes = plt.subplots(L, H, figsize=(cell * H + 1.2, cell * L + 1.0), squeeze=False)
    for l in range(L):
        for h in range(H):
            ax = axes[l][h]
            ax.imshow(att[l, h], cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
            ax.set_title(f"layer {l + 1}, head {h + 1}", fontsize=9)
            ax.set_xticks(range(T))
            ax.set_yticks(range(T))
            ax.set_xticklabels(labels if l == L - 1 else [""] * T, rotation=90, fontproperties=prop, fontsize=size)
            ax.set_yticklabels(labels if h == 0 else [""] * T, fontproperties=prop, fontsize=size)
            ax.tick_params(length=0)
    title = view["text"] + (f"  /  {view['pair']}" if view["pair"] is not None else "")
    fig.suptitle(title, fontproperties=prop, fontsize=12)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


_PAGE = """<!doctype html>
<html lang="ko"><head><meta charset="utf-8"><title>attention: __TITLE__</title>
<style>
body { font-family: "Noto Sans KR", "Noto Sans CJK KR", "NanumGothic", "Malgun Gothic", "Apple SD Gothic Neo", sans-serif; margin: 1.5em; }
table { border-collapse: collapse; } td { width: 1.6em; height: 1.6em; padding: 0; }
th { font-weight: normal; font-size: 0.85em; padding: 0 0.3em; white-space: nowrap; }
th.col { writing-mode: vertical-rl; text-align: left; height: auto; }
#info { margin: 0.6em 0; min-height: 1.2em; }
</style></head><body>
<h2>__TITLE__</h2>
<p>Rows: the attending token (query); columns: the attended token (key). Darker = more attention.</p>
<label>layer <select id="layer"></select></label>
<label>head <select id="head"></select></label>
<div id="info"></div>
<table id="grid"></table>
<script>
const V = __DATA__;
const L = V.attention.length, H = V.attention[0].length, T = V.labels.length;
const ls = document.getElementById("layer"), hs = document.getElementById("head");
for (let l = 0; l < L; l++) ls.add(new Option(String(l + 1), l));
hs.add(new Option("mean of heads", -1));
for (let h = 0; h < H; h++) hs.add(new Option(String(h + 1), h));
hs.value = 0;
function matrix(l, h) {
  if (h >= 0) return V.attention[l][h];
  const m = [];
  for (let i = 0; i < T; i++) { m.push([]); for (let j = 0; j < T; j++) { let s = 0; for (let k = 0; k < H; k++) s += V.attention[l][k][i][j]; m[i].push(s / H); } }
  return m;
}
function esc(s) { const d = document.createElement("div"); d.textContent = s; return d.innerHTML; }
function draw() {
  const m = matrix(+ls.value, +hs.value);
  let out = "<tr><th></th>" + V.labels.map(t => '<th class="col">' + esc(t) + "</th>").join("") + "</tr>";
  for (let i = 0; i < T; i++) {
    out += "<tr><th>" + esc(V.labels[i]) + "</th>";
    for (let j = 0; j < T; j++) {
      const a = m[i][j], c = Math.round(255 * (1 - a));
      out += '<td style="background: rgb(' + c + "," + c + ',255)" data-i="' + i + '" data-j="' + j + '"></td>';
    }
    out += "</tr>";
  }
  document.getElementById("grid").innerHTML = out;
}
document.getElementById("grid").addEventListener("mouseover", e => {
  const d = e.target.dataset; if (d.i === undefined) return;
  const a = matrix(+ls.value, +hs.value)[+d.i][+d.j];
  document.getElementById("info").textContent = V.labels[+d.i] + " \u2192 " + V.labels[+d.j] + ": " + a.toFixed(4);
});
ls.onchange = draw; hs.onchange = draw; draw();
</script></body></html>
"""


def write_html(view: dict, path: Path) -> Path:
    data = {"labels": view["labels"], "attention": np.round(view["attention"], 4).tolist()}
    title = view["text"] + (f" / {view['pair']}" if view["pair"] is not None else "")
    blob = json.dumps(data, ensure_ascii=False).replace("</", "<\\/")  # safe inside <script>
    path.write_text(_PAGE.replace("__TITLE__", html.escape(title)).replace("__DATA__", blob), encoding="utf-8")
    return path


def write_json(view: dict, path: Path) -> Path:
    out = {k: v for k, v in view.items() if k != "attention"}
    out["shape"] = list(view["attention"].shape)
    out["attention"] = view["attention"].tolist()
    path.write_text(json.dumps(out, ensure_ascii=False), encoding="utf-8")
    return path


def main(model: str, text: str, pair: str | None = None, out: str = "attention", font: str | None = None, device: str | None = None) -> dict:
    """Write out/attention.{png,html,json}; returns their paths and the view's shape."""
    from korbert.use import Encoder

    font_path = hangul_font(font)  # before the model loads: a missing font fails at once
    enc = Encoder(model, device=device, attention=True)
    view = attention(enc, text, pair)
    missing = missing_glyphs(font_path, "".join(view["labels"]) + text + (pair or ""))
    if missing:
        print(f"korbert attention: warning: {font_path} has no glyph for {''.join(sorted(missing))!r}; those draw as boxes")
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    return {
        "png": str(draw_png(view, folder / "attention.png", font_path)),
        "html": str(write_html(view, folder / "attention.html")),
        "json": str(write_json(view, folder / "attention.json")),
        "shape": list(view["attention"].shape), "tokens": view["tokens"], "font": font_path,
    }


def cli(argv: list[str]) -> dict:
    import argparse

    ap = argparse.ArgumentParser(prog="korbert attention", description="Attention of every layer and head for one input: PNG grid, HTML viewer, JSON.")
    ap.add_argument("model", help="exported model folder (e.g. runs/demo/pretrain/final)")
    ap.add_argument("text")
    ap.add_argument("pair", nargs="?", help="optional second sentence ([CLS] A [SEP] B [SEP])")
    ap.add_argument("--out", default="attention", help="output folder (default: ./attention)")
    ap.add_argument("--font", help="a .ttf/.otf with Hangul glyphs (default: found automatically, see korbert/attention.py)")
    ap.add_argument("--device", default="")
    a = ap.parse_args(argv)
    try:
        r = main(a.model, a.text, a.pair, a.out, a.font, a.device or None)
    except RuntimeError as e:
        from corpus_tools.text import InputError

        raise InputError(str(e)) from None
    L, H, T, _ = r["shape"]
    print(f"attention: {L} layers x {H} heads over {T} tokens -> {r['png']}, {r['html']}, {r['json']} (font {r['font']})")
    return r
