"""korbert: a Korean BERT pipeline. Importing the package lets `AutoTokenizer.from_pretrained(folder)`
find `KorBertTokenizer` (registered when transformers' auto module loads; see korbert/hub.py)."""

from korbert.hub import install_registration as _install_registration

_install_registration()
