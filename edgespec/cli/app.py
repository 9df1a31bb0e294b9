"""The `edgespec` command: chat, generate, serve, bench, profile, export, models, doctor."""

# each module adds its commands to the app; --help lists them in this order
from edgespec.cli import generate, chat, bench, profile, serve, export, doctor, models  # noqa: F401, I001
from edgespec.cli.common import app


def main() -> None:
    app()
