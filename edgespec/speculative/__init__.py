"""The speculation engine: the loop, its interfaces (Backend, Drafter), verification,
the draft-length controller and what it learns."""
