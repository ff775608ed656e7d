from zmqueue.cli.main import main

raise SystemExit(main())
