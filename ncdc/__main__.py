import sys

from ncdc.cli import main

sys.exit(main())
