"""One module per transport. Each imports only the contract, records and errors from
hopbench; the core reaches them through hopbench.transport's registry."""
