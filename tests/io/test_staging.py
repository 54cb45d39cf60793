"""Whole-or-nothing writes: a staged file or directory replaces its place only when whole."""

import errno

import pytest

from elmo_testing import no_space
from spacy_elmo.io.staging import (
    RETIRED_MARK,
    Replaceable,
    WriteError,
    put_back_retired,
    refuse_writing_over_inputs,
    staged_directory,
    staged_file,
    write_atomically,
)


def test_a_staged_file_replaces_its_place_when_the_block_ends(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"before")
    with staged_file(target) as staging:
        assert staging.parent == tmp_path and staging.name.startswith(".out.bin.staging-") and staging.read_bytes() == b""
        staging.write_bytes(b"after")
        assert target.read_bytes() == b"before"  # nothing replaced before the block ends
    assert target.read_bytes() == b"after" and sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


@pytest.mark.parametrize("error", [no_space(), ValueError("bad input"), KeyboardInterrupt()])
def test_a_failed_staged_file_keeps_what_was_there_and_leaves_no_staging(tmp_path, error):
    target = tmp_path / "out.bin"
    target.write_bytes(b"before")
    with pytest.raises(type(error) if not isinstance(error, OSError) else WriteError) as caught:
        with staged_file(target) as staging:
            staging.write_bytes(b"half")
            raise error
    if isinstance(error, OSError):  # the block's OSErrors are the output's
        assert str(caught.value) == f"{target}: could not be written (No space left on device)" and caught.value.errno == errno.ENOSPC
    else:
        assert caught.value is error
    assert target.read_bytes() == b"before" and sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_write_atomically_creates_missing_folders_and_names_the_file_on_failure(tmp_path):
    target = tmp_path / "new" / "dir" / "file.txt"
    write_atomically(target, lambda out: out.write(b"text"))
    assert target.read_bytes() == b"text"

    def fail(out):
        out.write(b"part")
        raise no_space()

    with pytest.raises(WriteError, match="file.txt: could not be written \\(No space left on device\\)"):
        write_atomically(target, fail)
    assert target.read_bytes() == b"text" and [p.name for p in target.parent.iterdir()] == ["file.txt"]


def test_a_staged_directory_is_swapped_in_whole(tmp_path):
    target = tmp_path / "pipe"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with staged_directory(target) as staging:
        assert staging.parent == tmp_path and staging.name.startswith("pipe.staging-") and not any(staging.iterdir())
        (staging / "sub").mkdir()
        (staging / "sub" / "new.txt").write_text("new")
        assert (target / "old.txt").is_file()
    assert [p.relative_to(target).as_posix() for p in sorted(target.rglob("*"))] == ["sub", "sub/new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_a_failed_staged_directory_keeps_the_previous_one(tmp_path):
    target = tmp_path / "pipe"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with pytest.raises(WriteError, match="pipe: could not be written"):
        with staged_directory(target) as staging:
            (staging / "new.txt").write_text("new")
            raise no_space()
    assert [p.name for p in target.iterdir()] == ["old.txt"] and sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_the_current_directory_can_be_staged(tmp_path, monkeypatch):
    target = tmp_path / "pipe"
    target.mkdir()
    monkeypatch.chdir(target)
    with staged_directory(".") as staging:
        (staging / "new.txt").write_text("new")
    assert [p.name for p in target.iterdir()] == ["new.txt"] and sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_a_swap_cut_between_its_renames_is_put_back(tmp_path):
    target, retired = tmp_path / "model", tmp_path / ("model" + RETIRED_MARK + "k1ll3d")
    retired.mkdir()
    (retired / "weights").write_text("previous")
    (tmp_path / "model.old").mkdir()  # the user's own
    put_back_retired(target)  # killed after the first rename: the previous one comes back
    assert (target / "weights").read_text() == "previous" and not retired.exists()
    retired.mkdir()
    put_back_retired(target)  # killed after the second: the retired one goes
    assert (target / "weights").read_text() == "previous" and not retired.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "model.old"]


def test_a_swap_keeps_a_users_own_folders_named_like_it(tmp_path):
    target = tmp_path / "pipe"
    for name in ("pipe", "pipe.old", "pipe.bak"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "file").write_text(name)
    with staged_directory(target) as staging:
        (staging / "file").write_text("new")
    assert {p.name: (p / "file").read_text() for p in tmp_path.iterdir()} == {"pipe": "new", "pipe.old": "pipe.old", "pipe.bak": "pipe.bak"}


def test_an_error_naming_a_file_inside_the_staging_names_the_target(tmp_path):
    target = tmp_path / "model"
    with pytest.raises(WriteError) as caught:
        with staged_directory(target) as staging:
            write_atomically(staging / "weights.npz", lambda out: (_ for _ in ()).throw(no_space()))
    assert str(caught.value) == f"{target}: could not be written (No space left on device)"
    assert sorted(p.name for p in tmp_path.iterdir()) == []


NOTES_ONLY = Replaceable(lambda path: all(p.suffix == ".txt" for p in path.iterdir()), "a folder of notes")


def test_a_staged_directory_replaces_only_what_it_may(tmp_path, monkeypatch):
    target = tmp_path / "notes"
    target.mkdir()
    (target / "data.bin").write_bytes(b"mine")
    with pytest.raises(ValueError, match="notes: already exists and is neither empty nor a folder of notes"):
        with staged_directory(target, replaces=NOTES_ONLY) as staging:
            (staging / "new.txt").write_text("new")
    assert [p.name for p in target.iterdir()] == ["data.bin"] and [p.name for p in tmp_path.iterdir()] == ["notes"]
    (target / "data.bin").rename(target / "old.txt")
    with staged_directory(target, replaces=NOTES_ONLY) as staging:
        (staging / "new.txt").write_text("new")
    assert [p.name for p in target.iterdir()] == ["new.txt"]
    (target / "new.txt").unlink()
    with staged_directory(target, replaces=NOTES_ONLY) as staging:  # empty
        (staging / "data.bin").write_bytes(b"new")
    assert [p.name for p in target.iterdir()] == ["data.bin"]
    (tmp_path / "file").write_text("a file, not a folder")
    with pytest.raises(ValueError, match="file: already exists and is neither empty nor a folder of notes"):
        with staged_directory(tmp_path / "file", replaces=NOTES_ONLY):
            pass
    assert (tmp_path / "file").read_text() == "a file, not a folder"


def test_a_staged_directory_never_replaces_the_working_directory(tmp_path, monkeypatch):
    target = tmp_path / "notes"
    (target / "inner").mkdir(parents=True)
    monkeypatch.chdir(target / "inner")
    with pytest.raises(ValueError, match="notes: holds the working directory"):
        with staged_directory(target, replaces=Replaceable(lambda path: True, "anything")):
            pass
    assert (target / "inner").is_dir() and [p.name for p in tmp_path.iterdir()] == ["notes"]


def test_a_staged_directory_first_finishes_a_swap_left_half_done(tmp_path):
    target, retired = tmp_path / "notes", tmp_path / ("notes" + RETIRED_MARK + "k1ll3d")
    retired.mkdir()
    (retired / "data.bin").write_bytes(b"mine")  # killed between the renames: the previous one is not notes
    with pytest.raises(ValueError, match="neither empty nor a folder of notes"):
        with staged_directory(target, replaces=NOTES_ONLY):
            pass
    assert (target / "data.bin").read_bytes() == b"mine" and [p.name for p in tmp_path.iterdir()] == ["notes"]


def test_a_name_with_glob_characters_puts_back_only_its_own_swap(tmp_path):
    other = tmp_path / ("ab" + RETIRED_MARK + "k1ll3d")  # another folder's swap, cut short
    other.mkdir()
    (other / "data.bin").write_bytes(b"ab's only copy")
    with staged_directory(tmp_path / "a[b]", replaces=NOTES_ONLY) as staging:
        (staging / "new.txt").write_text("new")
    assert (other / "data.bin").read_bytes() == b"ab's only copy"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["a[b]", other.name])


def test_a_linked_directory_is_replaced_where_it_lies_and_the_link_stays(tmp_path):
    real, link = tmp_path / "disk" / "notes", tmp_path / "notes"
    real.mkdir(parents=True)
    (real / "old.txt").write_text("old")
    link.symlink_to(real)
    for text in ("first", "second"):
        with staged_directory(link, replaces=NOTES_ONLY) as staging:
            (staging / "new.txt").write_text(text)
        assert link.is_symlink() and [p.name for p in real.iterdir()] == ["new.txt"] and (link / "new.txt").read_text() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["disk", "notes"] and [p.name for p in real.parent.iterdir()] == ["notes"]


def test_a_removed_working_directory_does_not_stop_a_write_elsewhere(tmp_path, monkeypatch):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    with staged_directory(tmp_path / "notes", replaces=NOTES_ONLY) as staging:
        (staging / "new.txt").write_text("new")
    assert [p.name for p in (tmp_path / "notes").iterdir()] == ["new.txt"]


def test_an_output_over_an_input_is_refused_through_links_and_a_neighbour_is_not(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "text.txt").write_text("a\n", encoding="utf-8")
    (tmp_path / "link.txt").symlink_to(tmp_path / "text.txt")
    refuse = refuse_writing_over_inputs
    with pytest.raises(ValueError, match=r"link.txt: the output is .*text.txt, which this command reads"):
        refuse(tmp_path / "link.txt", [tmp_path / "text.txt"])
    with pytest.raises(ValueError, match=r"the output lies inside .*model, which"):
        refuse(tmp_path / "model" / "new" / "out.h5", [None, tmp_path / "model"])
    with pytest.raises(ValueError, match=r"the output holds .*text.txt, which"):
        refuse(tmp_path, [tmp_path / "text.txt"])
    refuse(tmp_path / "model-2", [tmp_path / "model", tmp_path / "text.txt", None])  # a name that only starts alike
    refuse(tmp_path / "out.txt", [])
