"""How the ranks of a group reach each other: the backend registry (`backends`), the frame format
(`wire`), the contract a transport keeps (`base`), the collectives' algorithms over any transport
(`algorithms`), and the transports: `tcp` (sockets, with the shared-memory engine `shm_engine` for a
group on one host and `shm` slot rings between ranks of one host otherwise), `ucx` (ucxx) and `mpi`
(mpi4py, its own processes and collectives)."""
