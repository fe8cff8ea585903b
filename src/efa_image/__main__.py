from efa_image.cli import main

raise SystemExit(main())
