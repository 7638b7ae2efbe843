"""How the ranks of a group reach each other: the frame format (`wire`), the contract a transport keeps
(`base`), and the transports: `tcp` (sockets, with the shared-memory engine `shm_engine` for a group on
one host and `shm` slot rings between ranks of one host otherwise) and `ucx` (ucxx)."""
