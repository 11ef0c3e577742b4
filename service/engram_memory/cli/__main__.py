"""`python -m engram_memory.cli`."""

from engram_memory.cli.main import main

raise SystemExit(main())
