import sys

from kafkalog.cli.main import main

sys.exit(main())
