/* efa-image MPI self-check: each rank contributes rank+1 and every rank must
 * see n(n+1)/2. Prints one line per rank with its host, so a multi-host run
 * shows which hosts took part. Exit status 0 only when the sum is right. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    int rank, size, sum = 0, value;
    char host[MPI_MAX_PROCESSOR_NAME];
    int host_len;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(host, &host_len);
    value = rank + 1;
    MPI_Allreduce(&value, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("rank %d of %d on %s: sum %d expected %d\n", rank, size, host, sum,
           size * (size + 1) / 2);
    fflush(stdout);
    MPI_Finalize();
    return sum == size * (size + 1) / 2 ? 0 : 1;
}
