"""`korbert data get` end to end against a mirror the test builds: a directory, then the same folder
served over HTTP on 127.0.0.1. The pins are swapped for the test files' own (the real ones name files
this machine cannot fetch); everything else (fetch, verify, derive, manifest, re-run) is the real code."""

from __future__ import annotations

import gzip
import http.server
import io
import json
import tarfile
import threading
from contextlib import contextmanager
from dataclasses import replace
from functools import partial

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import evals.data
from corpus_tools.text import InputError
from korbert import corpora, data_get
from korbert.download import file_digests

DEV = {"version": "KorQuAD_v1.0_dev", "data": [{"title": "대한민국의 수도", "paragraphs": [{
    "context": "서울특별시는 대한민국의 수도이자 최대 도시로, 한강을 사이에 두고 강북과 강남으로 나뉜다. 조선 시대부터 수도였다.",
    "qas": [{"id": "d1", "question": "대한민국의 수도는?", "answers": [{"text": "서울특별시", "answer_start": 0}]}]}]}]}
TRAIN = {"version": "KorQuAD_v1.0_train", "data": [{"title": "부산", "paragraphs": [{
    "context": "부산광역시는 대한민국 남동부의 항구 도시이다.",
    "qas": [{"id": "t1", "question": "부산은 어떤 도시인가?", "answers": [{"text": "항구 도시", "answer_start": 19}]}]}]}]}
NSMC_TEST = "id\tdocument\tlabel\n101\t정말 재미있는 영화였어요 강력 추천합니다\t1\n102\t시간 낭비였다\t0\n"
NSMC_TRAIN = "id\tdocument\tlabel\n201\t최고의 영화\t1\n202\t별로였다\t0\n"
CRAWL = {  # movie -> reviews; 101 is an NSMC test id, 9 copies test review 101 with other spacing and punctuation
    "1": [{"review": "연기가 좋았다", "review_id": "1", "rating": "9", "movie_id": "1"},
          {"review": "정말 재미있는 영화였어요 강력 추천합니다", "review_id": "101", "rating": "10", "movie_id": "1"},
          {"review": "정말 재미있는 영화였어요... 강력추천합니다!!", "review_id": "9", "rating": "10", "movie_id": "1"}],
    "2": [{"review": "  ", "review_id": "5", "rating": "1", "movie_id": "2"},
          {"review": "음악이 아름답다", "review_id": "7", "rating": "8", "movie_id": "2"}],
    # KLUE dev text: a NER sentence by letters and digits (15 of them), an NLI premise whole inside a longer review
    "4": [{"review": "배우들의 연기가 정말 훌륭했던 영화", "review_id": "21", "rating": "9", "movie_id": "4"},
          {"review": "주인공의 선택이 마지막까지 이해되지 않았다. 그래도 볼만함", "review_id": "22", "rating": "6", "movie_id": "4"}],
}
PREMISE = "한강은 서울의 중심을 가로질러 흐르는 강이다."  # 24 characters: held whole by article 6
KLUE = {
    "klue/klue-nli-v1.1_train.json": [{"guid": "nli_t0", "premise": "비가 온다.", "hypothesis": "날씨가 맑다.", "gold_label": "contradiction"}],
    "klue/klue-nli-v1.1_dev.json": [
        {"guid": "nli_d0", "premise": PREMISE, "hypothesis": "한강은 바다이다.", "gold_label": "contradiction"},
        {"guid": "nli_d1", "premise": "주인공의 선택이 마지막까지 이해되지 않았다.", "hypothesis": "결말이 납득된다.", "gold_label": "contradiction"}],
    "klue/klue-sts-v1.1_train.json": [{"guid": "sts_t0", "sentence1": "방이 깨끗했다.", "sentence2": "객실이 청결했다.", "labels": {"label": 4.2}}],
    "klue/klue-sts-v1.1_dev.json": [{"guid": "sts_d0", "sentence1": "위치가 좋다.", "sentence2": "교통이 편하다.", "labels": {"label": 2.4}}],
    "klue/ynat-v1.1_train.json": [{"guid": "ynat_t0", "title": "주가 급등", "label": "경제"}],
    "klue/ynat-v1.1_dev.json": [{"guid": "ynat_d0", "title": "신형 휴대폰 공개", "label": "IT과학"}],
}
NER_DEV = "## klue-ner_d0\t배우들의 연기가 정말 훌륭했던 영화!\n" + "".join(f"{c}\tO\n" for c in "배우들의 연기가 정말 훌륭했던 영화!")
NER_TRAIN = "## klue-ner_t0\t<서울:LC>에 간다\n서\tB-LC\n울\tI-LC\n에\tO\n \tO\n간\tO\n다\tO\n"
COPIED = "서울특별시는 대한민국의 수도이자 최대 도시로, 한강을 사이에 두고 강북과 강남으로 나뉜다."  # 49 characters of the dev context
SHORT = "서울특별시는 대한민국의 수도이자 최대 도시로, 한강을"  # a run of fewer than 48
ARTICLES = [
    {"id": "1", "url": "u1", "title": "고양이", "text": "고양이는 포유류이다.\n\n집에서 기른다."},
    {"id": "2", "url": "u2", "title": "대한민국의 수도", "text": "수도에 관한 글."},
    {"id": "3", "url": "u3", "title": "서울", "text": f"서울 개요.\n{COPIED} 이후 서술."},
    {"id": "4", "url": "u4", "title": "한강", "text": f"{SHORT} 흐르는 강이다."},
    {"id": "5", "url": "u5", "title": "빈 문서", "text": ""},
    {"id": "6", "url": "u6", "title": "강", "text": f"강의 개요.\n{PREMISE} 끝."},
]


def _tar_gz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture
def mirror(tmp_path, monkeypatch):
    """A data folder to mirror from, and the registry pinned to its files."""
    m = tmp_path / "mirror"
    files = {
        "nsmc/ratings_train.txt": NSMC_TRAIN.encode(), "nsmc/ratings_test.txt": NSMC_TEST.encode(),
        "korquad/KorQuAD_v1.0_train.json": json.dumps(TRAIN, ensure_ascii=False).encode(),
        "korquad/KorQuAD_v1.0_dev.json": json.dumps(DEV, ensure_ascii=False).encode(),
        **{rel: json.dumps(rows, ensure_ascii=False).encode() for rel, rows in KLUE.items()},
        "klue/klue-ner-v1.1_dev.tsv": NER_DEV.encode(), "klue/klue-ner-v1.1_train.tsv": NER_TRAIN.encode(),
        "downloads/nsmc-crawl.tar.gz": _tar_gz({f"nsmc-x/raw/{k}.json": json.dumps(v, ensure_ascii=False).encode() for k, v in CRAWL.items()}),
        "downloads/petitions-archive.tar.gz": _tar_gz({
            "petitions_archive-x/petitions_2017-08": (json.dumps({"title": "제목", "content": "청원 내용입니다."}, ensure_ascii=False) + "\n").encode(),
            "petitions_archive-x/petitions_2017-09": (json.dumps({"title": "빈", "content": ""}, ensure_ascii=False) + "\n"
                                                      + json.dumps({"title": "둘", "content": "둘째 청원."}, ensure_ascii=False) + "\n").encode(),
            "petitions_archive-x/README.md": b"not a month",
            "petitions_archive-x/files": b"petitions_2017-08\npetitions_2017-09\n",  # the months it holds
        }),
    }
    for rel, data in files.items():
        (m / rel).parent.mkdir(parents=True, exist_ok=True)
        (m / rel).write_bytes(data)
    table = pa.Table.from_pylist(ARTICLES)
    for i, rel in enumerate(r.rel for r in data_get.DATASETS["kowiki"].remotes):  # every article in the first file; the others empty
        (m / rel).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table if i == 0 else table.slice(0, 0), m / rel, row_group_size=2)
    # the code's pins, swapped for these files' (the evaluation files by git blob, as the real ones)
    for name in ("nsmc", "korquad", "klue"):
        d = data_get.DATASETS[name]
        monkeypatch.setitem(data_get.DATASETS, name, replace(d, remotes=[replace(r, git_blob=file_digests(m / r.rel)["git_blob"]) for r in d.remotes]))
    monkeypatch.setattr(evals.data, "KORQUAD_GIT_BLOBS", tuple(r.git_blob for r in data_get.DATASETS["korquad"].remotes))
    monkeypatch.setattr(corpora, "CRAWL_REVIEWS", 7)
    # what a data folder fetched from the origins records: the mirror's manifest vouches for the Hub files
    manifest = {"files": {r.rel: file_digests(m / r.rel) for r in data_get.DATASETS["kowiki"].remotes}, "datasets": {}}
    (m / data_get.MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    return m


def _jsonl(path):
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def test_get_all_from_a_directory_mirror_derives_exact_corpora_and_a_rerun_does_nothing(tmp_path, mirror, capsys):
    out = tmp_path / "data"
    manifest = data_get.get(["all"], out, mirror=str(mirror), progress=False)
    assert (out / "nsmc" / "ratings_test.txt").read_text(encoding="utf-8") == NSMC_TEST
    assert json.loads((out / "korquad" / "KorQuAD_v1.0_train.json").read_text(encoding="utf-8")) == TRAIN
    # reviews: test id 101 and its near-duplicate 9 out, the blank one out
    assert _jsonl(out / "corpus" / "reviews.jsonl.gz") == [
        {"id": "review-1", "text": "연기가 좋았다"}, {"id": "review-7", "text": "음악이 아름답다"}]
    assert manifest["datasets"]["reviews"]["counts"] == {  # (and the two holding KLUE dev text, fetched before them)
        "crawl_reviews": 7, "empty": 1, "nsmc_test_id": 1, "nsmc_test_text": 1, "klue_review": 1, "klue_text": 1, "duplicate_id": 0,
        "documents": 2}
    assert (out / "klue" / "klue-ner-v1.1_dev.tsv").read_text(encoding="utf-8") == NER_DEV
    assert json.loads((out / "klue" / "ynat-v1.1_train.json").read_text(encoding="utf-8")) == KLUE["klue/ynat-v1.1_train.json"]
    assert _jsonl(out / "corpus" / "petitions.jsonl.gz") == [
        {"id": "petitions_2017-08-0", "title": "제목", "text": "청원 내용입니다."}, {"id": "petitions_2017-09-1", "title": "둘", "text": "둘째 청원."}]
    # kowiki: the dev title and the 48+-character copy out; the shorter shared run and the rest kept, a paragraph a line
    assert _jsonl(out / "corpus" / "kowiki.jsonl.gz") == [
        {"id": "1", "title": "고양이", "text": "고양이는 포유류이다.\n집에서 기른다."},
        {"id": "4", "title": "한강", "text": f"{SHORT} 흐르는 강이다."}]
    assert manifest["datasets"]["kowiki"]["counts"] == {
        "articles": 6, "empty": 1, "korquad_title": 1, "korquad_context": 1, "klue_review": 0, "klue_text": 1, "documents": 2}
    rec = manifest["files"]["nsmc/ratings_train.txt"]
    assert rec["pinned_by"] == "the code" and rec["bytes"] == len(NSMC_TRAIN.encode()) and len(rec["sha256"]) == 64
    assert manifest["files"][data_get.DATASETS["kowiki"].remotes[0].rel]["pinned_by"] == "the mirror's manifest"
    assert json.loads((out / data_get.MANIFEST).read_text(encoding="utf-8")) == manifest

    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and p.name != data_get.MANIFEST}
    capsys.readouterr()
    data_get.get(["all"], out, mirror=str(tmp_path / "nowhere"), progress=False)  # nothing fetched: a mirror that is not there is never read
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and p.name != data_get.MANIFEST} == before
    assert "reviews: up to date" in capsys.readouterr().err


def test_a_changed_input_is_derived_again_and_a_bad_download_is_refused(tmp_path, mirror):
    out = tmp_path / "data"
    data_get.get(["reviews"], out, mirror=str(mirror), progress=False)  # brings nsmc, which it is filtered by
    assert (out / "nsmc" / "ratings_test.txt").is_file() and not (out / "korquad").exists()
    # a crawl archive that changed on the mirror is not re-fetched (the first download's sha256 holds it)...
    crawl = out / "downloads" / "nsmc-crawl.tar.gz"
    crawl.write_bytes(b"truncated")  # ...but a damaged local copy fails that check and is fetched again
    data_get.get(["reviews"], out, mirror=str(mirror), progress=False)
    assert crawl.read_bytes() == (mirror / "downloads" / "nsmc-crawl.tar.gz").read_bytes()
    # the evaluation files are pinned by the code: a mirror serving other bytes is refused, nothing kept
    (mirror / "korquad" / "KorQuAD_v1.0_dev.json").write_text("{}", encoding="utf-8")
    with pytest.raises(InputError, match="KorQuAD_v1.0_dev.json"):
        data_get.get(["korquad"], out, mirror=str(mirror), progress=False)
    assert not (out / "korquad" / "KorQuAD_v1.0_dev.json").exists()
    assert not list((out / "korquad").glob("*.part"))
    with pytest.raises(InputError, match="unknown dataset 'wiki'"):
        data_get.get(["wiki"], out, mirror=str(mirror), progress=False)


def test_files_it_did_not_write_are_used_when_pinned_and_otherwise_left_alone(tmp_path, mirror):
    """A data folder filled by hand (this project's ../shared/data holds NSMC-R where NSMC would go):
    the pinned KorQuAD dev file there is used as it is; another NSMC, or a corpus built elsewhere, is
    refused and left unchanged; --replace replaces them."""
    import shutil

    out = tmp_path / "data"
    (out / "korquad").mkdir(parents=True)
    shutil.copy(mirror / "korquad" / "KorQuAD_v1.0_dev.json", out / "korquad" / "KorQuAD_v1.0_dev.json")
    (mirror / "korquad" / "KorQuAD_v1.0_dev.json").unlink()  # not fetched: it could not be
    manifest = data_get.get(["korquad"], out, mirror=str(mirror), progress=False)
    assert manifest["files"]["korquad/KorQuAD_v1.0_dev.json"]["git_blob"] == data_get.DATASETS["korquad"].remotes[1].git_blob

    other = "id\tdocument\tlabel\n1\t다른 리뷰\t1\n"
    (out / "nsmc").mkdir()
    (out / "nsmc" / "ratings_train.txt").write_text(other, encoding="utf-8")
    with pytest.raises(InputError, match=r"ratings_train.txt: already there, not written by `korbert data get`.*--replace"):
        data_get.get(["nsmc"], out, mirror=str(mirror), progress=False)
    assert (out / "nsmc" / "ratings_train.txt").read_text(encoding="utf-8") == other
    assert not (out / "nsmc" / "ratings_test.txt").exists()
    (out / "corpus").mkdir()
    (out / "corpus" / "petitions.jsonl.gz").write_bytes(b"built elsewhere")
    with pytest.raises(InputError, match=r"petitions.jsonl.gz: already there, not written"):
        data_get.get(["petitions"], out, mirror=str(mirror), progress=False)
    assert (out / "corpus" / "petitions.jsonl.gz").read_bytes() == b"built elsewhere"

    data_get.get(["nsmc", "petitions"], out, mirror=str(mirror), progress=False, replace=True)
    assert (out / "nsmc" / "ratings_train.txt").read_text(encoding="utf-8") == NSMC_TRAIN
    assert [r["id"] for r in _jsonl(out / "corpus" / "petitions.jsonl.gz")] == ["petitions_2017-08-0", "petitions_2017-09-1"]


def test_a_changed_pin_is_fetched_again_and_a_crawl_count_that_differs_is_a_warning(tmp_path, mirror, monkeypatch, capsys):
    out = tmp_path / "data"
    data_get.get(["reviews"], out, mirror=str(mirror), progress=False)
    before = (out / "corpus" / "reviews.jsonl.gz").read_bytes()
    # a new pin (another commit of the crawl): the old archive is not reused, whatever the manifest recorded
    crawl = dict(CRAWL, **{"3": [{"review": "새로 추가된 리뷰", "review_id": "11", "rating": "7", "movie_id": "3"}]})
    (mirror / "downloads" / "nsmc-crawl.tar.gz").write_bytes(
        _tar_gz({f"nsmc-y/raw/{k}.json": json.dumps(v, ensure_ascii=False).encode() for k, v in crawl.items()}))
    d = data_get.DATASETS["reviews"]
    monkeypatch.setitem(data_get.DATASETS, "reviews", replace(d, remotes=[replace(d.remotes[0], url=d.remotes[0].url.replace(
        data_get.NSMC_COMMIT, "0" * 40), revision="0" * 40)]))
    # ... derived again from the new archive; a crawl that does not hold the count recorded for it is said so
    manifest = data_get.get(["reviews"], out, mirror=str(mirror), progress=False)
    assert (out / "corpus" / "reviews.jsonl.gz").read_bytes() != before
    assert [r["id"] for r in _jsonl(out / "corpus" / "reviews.jsonl.gz")] == ["review-1", "review-7", "review-11", "review-21", "review-22"]
    assert manifest["files"]["downloads/nsmc-crawl.tar.gz"]["revision"] == "0" * 40
    assert "the crawl holds 8 reviews, not the 7" in manifest["datasets"]["reviews"]["counts"]["warning"]
    assert "WARNING: " in capsys.readouterr().err

    # train and test swapped are not the official split; a damaged manifest is one line naming it
    nsmc = out / "nsmc"
    assert data_get.nsmc_protocol(nsmc / "ratings_train.txt", nsmc / "ratings_test.txt") == "official"
    assert data_get.nsmc_protocol(nsmc / "ratings_test.txt", nsmc / "ratings_train.txt") == "custom"
    (out / data_get.MANIFEST).write_text("{not json", encoding="utf-8")
    with pytest.raises(InputError, match=r"korbert-data.json: not a readable korbert-data.json"):
        data_get.get(["nsmc"], out, mirror=str(mirror), progress=False)


def test_get_over_http_from_a_mirror_served_on_localhost(tmp_path, mirror):
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(mirror))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        out = tmp_path / "data"
        manifest = data_get.get(["kowiki", "petitions"], out, mirror=url, progress=False)
        assert [a["id"] for a in _jsonl(out / "corpus" / "kowiki.jsonl.gz")] == ["1", "4", "6"]  # (no KLUE files here)
        assert manifest["files"]["korquad/KorQuAD_v1.0_dev.json"]["fetched_from"].startswith(url)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_petitions_read_a_zipped_month_and_every_month_the_archive_lists_issue_59(tmp_path, mirror):
    """At f032f9e the archive held January 2019 as petitions_2019-01.zip, which the reader skipped without a
    word. Every form of a month is read, and a month the archive's own `files` lists but does not hold is
    one line, with nothing written."""
    import zipfile

    assert "03dc3f3d69e03a0a4885350c6991e328fc0a6b81" in data_get.DATASETS["petitions"].remotes[0].url

    def month(title: str) -> bytes:
        return (json.dumps({"title": title, "content": f"{title}의 청원."}, ensure_ascii=False) + "\n").encode()

    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("petitions_2019-01", month("일월"))
    archive = {"p-y/files": b"petitions_2018-12\npetitions_2019-01\n", "p-y/petitions_2018-12": month("십이월"),
               "p-y/petitions_2019-01.zip": zipped.getvalue(), "p-y/petitions_2019-02.txt": month("이월")}  # not listed: read too
    (mirror / "downloads" / "petitions-archive.tar.gz").write_bytes(_tar_gz(archive))
    manifest = data_get.get(["petitions"], tmp_path / "d", mirror=str(mirror), progress=False)
    assert _jsonl(tmp_path / "d" / "corpus" / "petitions.jsonl.gz") == [
        {"id": "petitions_2018-12-0", "title": "십이월", "text": "십이월의 청원."},
        {"id": "petitions_2019-01-0", "title": "일월", "text": "일월의 청원."},
        {"id": "petitions_2019-02-0", "title": "이월", "text": "이월의 청원."}]
    assert manifest["datasets"]["petitions"]["counts"] == {
        "months": 3, "months_listed": 2, "petitions": 3, "empty": 0, "documents": 3}

    archive["p-y/files"] += b"petitions_2019-03\n"  # listed, and in no form in the archive
    (mirror / "downloads" / "petitions-archive.tar.gz").write_bytes(_tar_gz(archive))
    with pytest.raises(InputError, match=r"^petitions: cannot derive .*names 1 month\(s\) not in the archive .*: petitions_2019-03\)"):
        data_get.get(["petitions"], tmp_path / "e", mirror=str(mirror), progress=False)
    assert not (tmp_path / "e" / "corpus" / "petitions.jsonl.gz").exists() and not list((tmp_path / "e").rglob("*.tmp"))
    # content that decodes but does not check out is kept (a refetch would get the same archive), not dropped
    assert "downloads/petitions-archive.tar.gz" in json.loads((tmp_path / "e" / data_get.MANIFEST).read_text())["files"]
    assert (tmp_path / "e" / "downloads" / "petitions-archive.tar.gz").is_file()
    archive["p-y/files"] = b"2019-01/\nREADME\n"  # a list, but of no month: nothing would be checked
    (mirror / "downloads" / "petitions-archive.tar.gz").write_bytes(_tar_gz(archive))
    with pytest.raises(InputError, match=r"no `files` list at its top naming a month"):
        data_get.get(["petitions"], tmp_path / "f", mirror=str(mirror), progress=False)


def test_the_data_folder_is_korbert_data_else_the_user_cache_never_a_folder_beside_the_checkout_issue_59(tmp_path, monkeypatch, capsys):
    """The default was "this checkout's ../shared/data when there is one": this project's CI layout. The
    tests say where the data is ($KORBERT_DATA, set by .ci/run) and, in CI, fail rather than skip without it."""
    from conftest import data_file

    for var in ("KORBERT_DATA", "XDG_CACHE_HOME", "CI"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert data_get.default_folder() == tmp_path / ".cache" / "korbert" / "data"
    with pytest.raises(SystemExit):
        data_get.cli(["get", "--help"])
    assert "shared/data" not in capsys.readouterr().out
    with pytest.raises(pytest.skip.Exception, match=r"KORBERT_DATA is not set"):  # outside CI: skipped, saying why
        data_file("nsmc", "ratings_test.txt")
    monkeypatch.setenv("KORBERT_DATA", str(tmp_path / "data"))
    assert data_get.default_folder() == tmp_path / "data"
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"nsmc/ratings_test.txt is not there"):  # in CI: a failure
        data_file("nsmc", "ratings_test.txt")
    (tmp_path / "data" / "nsmc").mkdir(parents=True)
    (tmp_path / "data" / "nsmc" / "ratings_test.txt").write_text(NSMC_TEST, encoding="utf-8")
    assert data_file("nsmc", "ratings_test.txt") == tmp_path / "data" / "nsmc" / "ratings_test.txt"


def test_nsmc_protocol_is_named_by_content(tmp_path, mirror):
    from corpus_tools import SAMPLE_DATA

    assert data_get.nsmc_protocol(mirror / "nsmc" / "ratings_train.txt", mirror / "nsmc" / "ratings_test.txt") == "official"  # the pins, swapped
    assert data_get.nsmc_protocol(SAMPLE_DATA / "nsmc_train.txt", SAMPLE_DATA / "nsmc_test.txt") == "NSMC-R sample"
    (tmp_path / "t.txt").write_text(NSMC_TRAIN + "203\t하나 더\t1\n", encoding="utf-8")
    assert data_get.nsmc_protocol(tmp_path / "t.txt", mirror / "nsmc" / "ratings_test.txt") == "custom"


def test_the_command_gets_from_a_mirror_and_fails_in_one_line(tmp_path, mirror, capsys):
    from korbert.cli import main

    assert main(["data", "get", "petitions", "--out", str(tmp_path / "d"), "--mirror", str(mirror), "--quiet"]) == 0
    assert (tmp_path / "d" / "corpus" / "petitions.jsonl.gz").is_file()
    assert main(["data", "list", "--out", str(tmp_path / "d")]) == 0
    listed = capsys.readouterr().out
    assert "petitions  present" in listed and "nsmc       missing" in listed
    assert main(["data", "get", "korquad", "--out", str(tmp_path / "d"), "--mirror", str(tmp_path / "absent"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("korbert data: error: mirror ") and "absent" in err[-1]
    (tmp_path / "empty").mkdir()
    assert main(["data", "get", "korquad", "--out", str(tmp_path / "d"), "--mirror", str(tmp_path / "empty"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("korbert data: error: ") and "KorQuAD_v1.0_train.json" in err[-1]


# --- issue 59 ---------------------------------------------------------------------------------

@contextmanager
def _served(directory, prefix: str = "", status: dict | None = None):
    """`directory` over HTTP on 127.0.0.1 under `prefix`, answering `status[path]` for those paths;
    yields (its URL, the paths asked for, in order)."""
    asked: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **k):
            super().__init__(*a, directory=str(directory), **k)

        def log_message(self, *a):
            pass

        def do_GET(self):
            self.path = self.path.removeprefix(prefix)
            asked.append(self.path)
            if self.path in (status or {}):
                return self.send_error(status[self.path])
            return super().do_GET()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{prefix}", asked
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_dev_title_written_with_underscores_drops_the_article_titled_with_spaces_issue_59(tmp_path):
    """KorQuAD dev writes half its titles with underscores (노아의_방주); Wikipedia's title column has
    spaces. A reworded article (no 48-character run shared) is dropped by its title alone."""
    import unicodedata

    folder = tmp_path / "data"
    (folder / "korquad").mkdir(parents=True)
    dev = {"version": "KorQuAD_v1.0_dev", "data": [{"title": "노아의_방주", "paragraphs": [{
        "context": "노아의 방주는 창세기에 나오는 배로, 노아가 하느님의 명령에 따라 가족과 동물들을 태우고 대홍수를 피했다고 한다.",
        "qas": [{"id": "n1", "question": "방주를 만든 사람은?", "answers": [{"text": "노아", "answer_start": 0}]}]}]}]}
    (folder / "korquad" / "KorQuAD_v1.0_dev.json").write_text(json.dumps(dev, ensure_ascii=False), encoding="utf-8")
    rows = [{"id": "7", "url": "u7", "title": "노아의 방주", "text": "창세기의 홍수 이야기에서 노아가 지은 커다란 배를 가리킨다."},
            {"id": "8", "url": "u8", "title": unicodedata.normalize("NFD", " 노아의 방주 "), "text": "다른 판본."},
            {"id": "9", "url": "u9", "title": "노아의 방주 (영화)", "text": "2014년 영화이다."}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "wiki.parquet")
    counts = data_get.derive_kowiki(folder, {"part0": tmp_path / "wiki.parquet"})
    assert counts == {"articles": 3, "empty": 0, "korquad_title": 2, "korquad_context": 0, "klue_review": 0, "klue_text": 0, "documents": 1}
    assert [a["title"] for a in _jsonl(folder / "corpus" / "kowiki.jsonl.gz")] == ["노아의 방주 (영화)"]


def test_a_kowiki_derived_before_the_title_fix_is_derived_again_issue_59(tmp_path, mirror, capsys):
    out = tmp_path / "data"
    data_get.get(["kowiki", "reviews"], out, mirror=str(mirror), progress=False)
    manifest = json.loads((out / data_get.MANIFEST).read_text(encoding="utf-8"))
    for d in manifest["datasets"].values():  # what the code before the fix recorded
        if "inputs" in d:
            d["inputs"]["derivation"] = 1
    (out / data_get.MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    capsys.readouterr()
    data_get.get(["kowiki", "reviews"], out, mirror=str(mirror), progress=False)
    err = capsys.readouterr().err
    assert "kowiki: up to date" not in err and "kowiki: {" in err  # its title rule changed: derived again
    assert "reviews: up to date" in err  # its rules did not


def test_korquad_protocol_is_official_only_for_the_pinned_pair(tmp_path, mirror):
    from evals.data import korquad_protocol

    kq = mirror / "korquad"
    assert korquad_protocol(kq / "KorQuAD_v1.0_train.json", kq / "KorQuAD_v1.0_dev.json") == "official"  # the pins, swapped
    assert korquad_protocol(kq / "KorQuAD_v1.0_dev.json", kq / "KorQuAD_v1.0_dev.json") == "custom train file"
    other = tmp_path / "train.json"
    other.write_text(json.dumps(TRAIN, ensure_ascii=False, indent=1), encoding="utf-8")  # the same questions, other bytes
    assert korquad_protocol(other, kq / "KorQuAD_v1.0_dev.json") == "custom train file"


def _month(seed: int) -> bytes:
    """A month of petitions that gzip cannot squeeze much (random syllables): a splice of two
    archives then breaks inside the deflate stream, as a real one does."""
    import random

    r = random.Random(seed)
    return "".join(json.dumps({"title": "제목", "content": "".join(chr(r.randrange(0xAC00, 0xD7A4)) for _ in range(200))},
                              ensure_ascii=False) + "\n" for _ in range(20)).encode()


def test_an_unpinned_archive_that_fails_to_derive_is_dropped_and_fetched_again_issue_59(tmp_path, mirror):
    """The mirror's manifest vouches for no archive: the first download's sha256 would hold a bad
    one for ever. A derivation that fails is one line, and the archive and its record go."""
    listed = b"petitions_2017-08\npetitions_2017-09\n"
    old = _tar_gz({"p-x/files": listed, "p-x/petitions_2017-08": _month(1), "p-x/petitions_2017-09": _month(2)})
    new = _tar_gz({"p-x/files": listed, "p-x/petitions_2017-08": _month(3), "p-x/petitions_2017-09": _month(4)})
    archive, rel = mirror / "downloads" / "petitions-archive.tar.gz", "downloads/petitions-archive.tar.gz"
    archive.write_bytes(old[: len(old) // 2] + new[len(old) // 2:])  # what a resume across two versions made
    out = tmp_path / "data"
    with _served(mirror) as (url, asked):
        with pytest.raises(InputError) as e:
            data_get.get(["petitions"], out, mirror=url, progress=False)
        assert "petitions: cannot derive" in str(e.value) and "zlib" in str(e.value) and "\n" not in str(e.value)
        assert "removed" in str(e.value)
        manifest = json.loads((out / data_get.MANIFEST).read_text(encoding="utf-8"))
        assert rel not in manifest["files"] and not (out / rel).exists()
        archive.write_bytes(new)
        m = data_get.get(["petitions"], out, mirror=url, progress=False)  # fetched again, not held to the bad sha256
    assert asked.count("/" + rel) == 2
    assert m["datasets"]["petitions"]["counts"]["documents"] == 40 and m["files"][rel]["sha256"] == file_digests(archive)["sha256"]


@pytest.mark.parametrize("status", [403, 404])
def test_only_a_404_means_the_mirror_has_no_manifest_issue_59(tmp_path, mirror, status):
    with _served(mirror, prefix="/mirror-2404", status={"/" + data_get.MANIFEST: status}) as (url, _):
        if status == 404:  # no manifest: the archives are taken, their sha256 recorded
            m = data_get.get(["petitions"], tmp_path / "data", mirror=url, progress=False)
            assert m["files"]["downloads/petitions-archive.tar.gz"]["pinned_by"].startswith("nothing")
        else:
            with pytest.raises(InputError, match=rf"mirror {url}: cannot read its korbert-data.json \(.*HTTP {status}"):
                data_get.get(["petitions"], tmp_path / "data", mirror=url, progress=False)
            assert not (tmp_path / "data" / "downloads" / "petitions-archive.tar.gz").exists()


def test_a_pin_change_keeps_the_old_file_until_the_new_one_is_verified_issue_59(tmp_path, mirror, monkeypatch):
    out = tmp_path / "data"
    data_get.get(["reviews"], out, mirror=str(mirror), progress=False)
    crawl = out / "downloads" / "nsmc-crawl.tar.gz"
    before, record = crawl.read_bytes(), json.loads((out / data_get.MANIFEST).read_text(encoding="utf-8"))
    d = data_get.DATASETS["reviews"]
    monkeypatch.setitem(data_get.DATASETS, "reviews", replace(d, remotes=[replace(d.remotes[0], url=d.remotes[0].url.replace(
        data_get.NSMC_COMMIT, "0" * 40), revision="0" * 40)]))
    (mirror / "downloads" / "nsmc-crawl.tar.gz").unlink()  # the mirror has not got the new pin's archive (or we are offline)
    with pytest.raises(InputError, match="nsmc-crawl.tar.gz"):
        data_get.get(["reviews"], out, mirror=str(mirror), progress=False)
    assert crawl.read_bytes() == before  # the old archive is still there, and still recorded as the old pin's
    assert json.loads((out / data_get.MANIFEST).read_text(encoding="utf-8")) == record


def test_a_mirror_record_of_another_pin_does_not_vouch_for_this_one_issue_59(tmp_path, mirror):
    """A mirror filled under an earlier pin records that pin's URL and revision: its checksum is not this
    pin's, so a Hub file (which needs one) is refused instead of being recorded under the new revision."""
    m = mirror
    manifest = json.loads((m / data_get.MANIFEST).read_text(encoding="utf-8"))
    for r in data_get.DATASETS["kowiki"].remotes:
        manifest["files"][r.rel].update(url=r.url.replace(r.revision, "0" * 40), revision="0" * 40)
    (m / data_get.MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(InputError, match="records it for another revision, and without one the file cannot be verified"):
        data_get.get(["kowiki"], tmp_path / "out", mirror=str(m), progress=False)


# --- issue 60: KLUE ---------------------------------------------------------------------------

def test_klue_files_fetched_later_take_their_text_out_of_corpora_derived_before(tmp_path, mirror, capsys):
    out = tmp_path / "data"
    data_get.get(["reviews", "kowiki"], out, mirror=str(mirror), progress=False)
    assert [r["id"] for r in _jsonl(out / "corpus" / "reviews.jsonl.gz")] == ["review-1", "review-7", "review-21", "review-22"]
    capsys.readouterr()
    data_get.get(["klue"], out, mirror=str(mirror), progress=False)
    assert "reviews, kowiki: derived before files they are filtered by" in capsys.readouterr().err
    assert sorted(p.name for p in (out / "klue").iterdir()) == sorted(r.rel.split("/")[1] for r in data_get.DATASETS["klue"].remotes)
    capsys.readouterr()
    manifest = data_get.get(["reviews", "kowiki"], out, mirror=str(mirror), progress=False)  # the KLUE dev files are new inputs
    assert "up to date" not in capsys.readouterr().err
    assert [r["id"] for r in _jsonl(out / "corpus" / "reviews.jsonl.gz")] == ["review-1", "review-7"]
    assert [a["id"] for a in _jsonl(out / "corpus" / "kowiki.jsonl.gz")] == ["1", "4"]
    assert "klue/klue-nli-v1.1_dev.json" in manifest["datasets"]["kowiki"]["inputs"]
    assert "klue/klue-nli-v1.1_train.json" not in manifest["datasets"]["kowiki"]["inputs"]  # (only dev text is scored)
    capsys.readouterr()
    data_get.get(["nsmc"], out, mirror=str(mirror), progress=False)  # the corpora were derived with these KLUE files: no hint
    assert "derived before" not in capsys.readouterr().err
    ner = out / "klue" / "klue-ner-v1.1_dev.tsv"  # a KLUE dev file that is not the one the corpora were filtered by
    ner.write_text(ner.read_text(encoding="utf-8") + "## klue-ner-v1.1_dev_9999\t새 문장\n", encoding="utf-8")
    data_get.get(["nsmc"], out, mirror=str(mirror), progress=False)
    assert "reviews, kowiki: derived before files they are filtered by (klue-ner-v1.1_dev.tsv)" in capsys.readouterr().err
    # named in any order, KLUE's files come first and the corpora are derived without their text at once
    other = tmp_path / "other"
    data_get.get(["reviews", "klue"], other, mirror=str(mirror), progress=False)
    assert [r["id"] for r in _jsonl(other / "corpus" / "reviews.jsonl.gz")] == ["review-1", "review-7"]


def test_get_klue_refuses_a_file_that_is_not_the_pinned_one_in_one_line(tmp_path, mirror, capsys):
    from korbert.cli import main

    (mirror / "klue" / "klue-sts-v1.1_dev.json").write_text("[]", encoding="utf-8")
    assert main(["data", "get", "klue", "--out", str(tmp_path / "d"), "--mirror", str(mirror), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("korbert data: error: ") and "klue-sts-v1.1_dev.json" in err[-1]
    assert not (tmp_path / "d" / "klue" / "klue-sts-v1.1_dev.json").exists()


def test_the_klue_pins_are_the_shared_dev_files_blob_ids():
    """The code's pins (from the issue) against the files in ../shared/data/klue, which its README says are byte-identical."""
    from conftest import data_file

    from korbert.download import git_blob_id

    klue = data_file("klue", "klue-nli-v1.1_dev.json").parent
    pinned = {r.rel.split("/")[1]: r.git_blob for r in data_get.DATASETS["klue"].remotes}
    there = sorted(klue.glob("*_dev.*"))
    assert len(there) == 3
    for f in there:
        assert git_blob_id(f) == pinned[f.name], f.name
