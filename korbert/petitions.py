"""lovit/petitions_archive's months, read from its GitHub archive (a .tar.gz, never extracted to disk).

The archive's top folder holds one file per month, `petitions_YYYY-MM`: JSON Lines, a petition a line
({"title", "content", ...}). A month may also come as `petitions_YYYY-MM.txt`, gzipped (`.gz`) or zipped
(`petitions_YYYY-MM.zip` holding that one text file: January 2019 did until 03dc3f3). The archive's own
`files` lists the months it holds, a name a line. Every month it lists must be read, or the derivation
stops: a month skipped without a word is a month missing from the corpus. A month it does not list
(the list can lag behind the folder) is read as well, and counted.
"""

from __future__ import annotations

import gzip
import io
import re
import tarfile
import zipfile
from pathlib import Path
from typing import Iterator

MONTH = re.compile(r"^(petitions_\d{4}-\d{2})(?:\.txt)?(?:\.zip|\.gz)?$")  # a month's file, in any form it comes


def months(archive: Path, counts: dict) -> Iterator[tuple[str, bytes]]:
    """(month, its JSON Lines bytes) for every month at the archive's top, in month order, once the
    months are checked against its `files` list. counts gets "months" and "months_listed". A ValueError
    (one line) when the list is missing, names a month not there, or a month comes twice or in a zip
    that does not hold one file."""
    with tarfile.open(archive, "r:gz") as tar:
        found: dict[str, tarfile.TarInfo] = {}
        listed = None
        for m in tar.getmembers():
            top, _, name = m.name.partition("/")
            if not m.isfile() or "/" in name:
                continue
            if name == "files":
                listed = {hit[1] for line in tar.extractfile(m).read().decode("utf-8").split("\n")
                          if (hit := MONTH.match(line.strip()))}
            elif hit := MONTH.match(name):
                if hit[1] in found:
                    raise ValueError(f"{archive}: {hit[1]} comes twice ({found[hit[1]].name}, {m.name})")
                found[hit[1]] = m
        if not listed:
            raise ValueError(f"{archive}: no `files` list at its top naming a month (petitions_YYYY-MM) to check the months against")
        missing = sorted(listed - set(found))
        if missing:
            raise ValueError(f"{archive}: its `files` list names {len(missing)} month(s) not in the archive in any form read "
                             f"here (petitions_YYYY-MM, .txt, .gz, .zip): {', '.join(missing)}")
        counts["months"], counts["months_listed"] = len(found), len(listed)
        for month in sorted(found):
            yield month, _text(found[month].name, tar.extractfile(found[month]).read())


def _text(name: str, data: bytes) -> bytes:
    """A month's JSON Lines bytes, out of its .gz or .zip."""
    if name.endswith(".gz"):
        return gzip.decompress(data)
    if not name.endswith(".zip"):
        return data
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            inner = [i for i in z.infolist() if not i.is_dir() and not i.filename.startswith("__MACOSX/")]
            if len(inner) != 1:
                raise ValueError(f"{name}: a zip of {len(inner)} files, not of one month's text")
            return z.read(inner[0])
    except zipfile.BadZipFile as e:
        raise ValueError(f"{name}: not a readable zip ({e})") from None
