import sys

from torchyard.cli import main

sys.exit(main())
