! A Fortran MPI program (mpif90): Open MPI's Fortran bindings call PMPI_X,
! which librcoll-mpi defines, so its collectives run on rcoll too.
program t
  use mpi
  implicit none
  integer :: ierr, rank, n, i
  integer :: a(100), b(100)
  double precision :: d(10)
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, n, ierr)
  do i = 1, 100
    a(i) = rank + i
  end do
  call MPI_Allreduce(a, b, 100, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  d = rank
  call MPI_Allreduce(MPI_IN_PLACE, d, 10, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  call MPI_Bcast(a, 100, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
  if (b(1) /= n*(n-1)/2 + n .or. d(3) /= n*(n-1)/2 .or. a(5) /= 5) then
    print *, 'FAIL', rank, b(1), d(3), a(5)
    call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
  end if
  if (rank == 0) print *, 'fortran ok', b(1), d(3)
  call MPI_Finalize(ierr)
end program
