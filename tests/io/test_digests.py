"""Content digests: what they change with, and the twins' records they must still match."""

import hashlib

from spacy_elmo.io.digests import file_digest, model_digests, tree_digest


def test_tree_digest_of_a_file_is_sha256_of_its_name_then_its_contents(tmp_path):
    path = tmp_path / "train.spacy"
    path.write_bytes(b"x" * ((1 << 20) + 7))  # more than one block
    assert tree_digest(path) == hashlib.sha256(b"train.spacy" + path.read_bytes()).hexdigest()


def test_tree_digest_of_a_folder_hashes_relative_names_and_contents_in_sorted_order(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "w.bin").write_bytes(b"weights")
    (tmp_path / "a.json").write_bytes(b"{}")
    naive = hashlib.sha256(b"a.json" + b"{}" + b"b/w.bin" + b"weights").hexdigest()
    assert tree_digest(tmp_path) == naive


def test_tree_digest_changes_with_a_files_contents_or_name_and_not_with_the_folders_place(tmp_path):
    first, second = tmp_path / "one", tmp_path / "two"
    for folder in (first, second):
        folder.mkdir()
        (folder / "vocab.txt").write_text("<S>\n</S>\n<UNK>\n", encoding="utf-8")
    assert tree_digest(first) == tree_digest(second)
    (second / "vocab.txt").write_text("<S>\n</S>\n<UNK>\nthe\n", encoding="utf-8")
    assert tree_digest(first) != tree_digest(second)
    (first / "vocab.txt").rename(first / "words.txt")
    (second / "vocab.txt").write_text("<S>\n</S>\n<UNK>\n", encoding="utf-8")
    assert tree_digest(first) != tree_digest(second)


def test_file_and_model_digests_are_blake2b_of_each_files_contents(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"\x00\x01" * 1000)
    (tmp_path / "options.json").write_bytes(b'{"lstm": {}}')
    expected = {name: hashlib.blake2b((tmp_path / name).read_bytes(), digest_size=16).hexdigest() for name in ("options.json", "weights.bin")}
    assert file_digest(tmp_path / "weights.bin") == expected["weights.bin"]
    assert model_digests(tmp_path) == expected
