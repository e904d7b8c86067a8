"""The one exception type the CLI turns into a clear message and a non-zero exit."""

# What a newcomer should run when a step finds nothing to work on.
NEXT_STEP = "run 'make' (or 'energy-index refresh --source FOLDER_OR_URL')"


class PipelineError(Exception):
    """A failure the user can act on: the message names the file, field or row at fault."""

    def __init__(self, message: str, details: list[str] | None = None) -> None:
        super().__init__(message)
        self.details = details or []

    def __reduce__(self) -> tuple[type, tuple[str, list[str]]]:
        # Raised in worker processes too: the details must survive the trip back.
        return type(self), (self.args[0], self.details)

    def __str__(self) -> str:
        lines = [self.args[0], *(f"  - {detail}" for detail in self.details)]
        return "\n".join(lines)
