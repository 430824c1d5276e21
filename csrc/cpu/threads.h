/* pyfastpim's own thread count, process-wide.
 *
 * Every OpenMP region of the CPU kernels states its team size with
 * num_threads(pf_get_num_threads()), so the count is the same whichever Python
 * thread calls, and neither OpenMP's per-thread ICV (omp_set_num_threads, which
 * Debian's torch calls on import) nor another library changes it. The default
 * is OMP_NUM_THREADS when it holds a positive integer (its first item when it
 * is a list), else the number of CPUs in the process's affinity mask. */
#ifndef PF_THREADS_H
#define PF_THREADS_H

#define PF_MAX_THREADS 1024

/* The count the kernels use (>= 1); computes the default on first use. */
int pf_get_num_threads(void);
/* Sets it for the whole process; n is clamped to 1..PF_MAX_THREADS. */
void pf_set_num_threads(int n);
/* The default described above (reads the environment and the affinity mask). */
int pf_default_num_threads(void);

#endif
