"""The one way a command makes a blank spaCy pipeline from a language code it was given."""

import spacy
from spacy.language import Language


def blank_language(lang: str, setting: str = "--lang") -> Language:
    """`spacy.blank(lang)`; a ValueError naming `setting` where spaCy has no such language
    here (an unknown code, or a language whose tokenizer needs a package not installed)."""
    try:
        return spacy.blank(lang)
    except ImportError as err:
        raise ValueError(f"{setting} {lang!r}: spaCy cannot make this language's tokenizer here ({err})") from err
