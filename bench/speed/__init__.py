"""Speed benchmarks of the product: ``shapes`` (this tree against another commit on the input shapes users have),
``against_commit`` (one stream, the same comparison), ``default_cli`` (the command line and its cold start),
``gpu_corpus`` (corpus mode on a lent GPU) and ``data`` (the timing text)."""
