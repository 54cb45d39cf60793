"""The first three entries of every vocabulary in the project (the softmax's `vocab.txt`
and the word encoder's table): the sentence boundaries and the unknown word."""

SPECIAL_TOKENS = ("<S>", "</S>", "<UNK>")
BOS_ID, EOS_ID, UNK_ID = 0, 1, 2
