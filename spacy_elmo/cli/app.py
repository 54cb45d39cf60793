"""The typer app every command module registers with."""
import typer

app = typer.Typer(name="spacy_elmo", help="ELMo contextual word vectors for spaCy.", no_args_is_help=True)
