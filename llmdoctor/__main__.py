"""`python -m llmdoctor` is the `llmdoctor` command."""
from llmdoctor.cli import cli

if __name__ == "__main__":
    cli(prog_name="llmdoctor")
