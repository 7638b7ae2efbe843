"""python -m tg.launch: the same as the tglaunch command."""
import sys

from tg.launch import main

sys.exit(main())
