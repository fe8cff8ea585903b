"""The MPI self-check's output as a job prints it: rank lines in the format of
roles/openmpi's mpi_allreduce_check ("rank %d of %d on %s: sum %d expected %d") and Open
MPI's MTL selection (mtl_base_verbose, mtl_ofi_verbose), for the tests that judge it."""

# One job of two ranks, one per host, through the OFI MTL on tcp.
OUTPUT = """\
[efa-mpi-1:00012] mca: base: components_open: opening mtl components
[efa-mpi-1:00012] select: initializing mtl component ofi
[efa-mpi-1:00012] (   mtl) Selected component [ofi]
[efa-mpi-1:00012] mtl_ofi_component.c:343: mtl:ofi:provider: tcp
[efa-mpi-2:00034] (   mtl) Selected component [ofi]
[efa-mpi-2:00034] mtl_ofi_component.c:343: mtl:ofi:provider: tcp
rank 1 of 2 on efa-mpi-2: sum 3 expected 3
rank 0 of 2 on efa-mpi-1: sum 3 expected 3
"""


# srun without --mpi=pmix: every process a world of its own (lines in the format of
# roles/openmpi's mpi_allreduce_check, each rank summing only its own rank + 1).
SINGLETONS = """\
[c1:00012] (   mtl) Selected component [ofi]
[c1:00012] mtl_ofi_component.c:343: mtl:ofi:provider: tcp
[c2:00034] (   mtl) Selected component [ofi]
[c2:00034] mtl_ofi_component.c:343: mtl:ofi:provider: tcp
rank 0 of 1 on c1: sum 1 expected 1
rank 0 of 1 on c2: sum 1 expected 1
"""
