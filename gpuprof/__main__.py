"""`python -m gpuprof` is the `gpuprof` command."""

import sys

from gpuprof.cli import main

sys.exit(main())
