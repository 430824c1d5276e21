/* pyfastpim's own thread count, process-wide.
 *
 * Every OpenMP region of the CPU kernels states its team size with
 * num_threads(pf_get_num_threads()), or pf_threads_for(work) where the work can
 * be small, so the count is the same whichever Python thread calls, and neither
 * OpenMP's per-thread ICV (omp_set_num_threads, which Debian's torch calls on
 * import) nor another library changes it. The default
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

/* Work units one thread should get before another is worth waking: a unit is about one
 * element of an element-wise pass (a few ns), or PF_MACS_PER_UNIT multiply-adds of a product
 * kernel, so 16384 units are some tens of microseconds of one core. A smaller kernel (the input
 * row of a batch-1 product, its 1x64 @ 64x64 product) opened an OpenMP region of every core for
 * microseconds of work: on a busy machine one descheduled team thread kept the others at the
 * barrier, and the call took milliseconds instead of tens of microseconds. */
#define PF_WORK_PER_THREAD 16384.0
#define PF_MACS_PER_UNIT 16.0
/* The threads worth waking for work units: min(pf_get_num_threads(), max(1, work /
 * PF_WORK_PER_THREAD)). The kernels partition their work so that results do not depend on
 * the team size, so this changes speed only. */
int pf_threads_for(double work);
/* Test hook: on = 0 makes pf_threads_for return pf_get_num_threads() for any work (the
 * thread-count tests' small cases then still run on a team), 1 restores it, < 0 only asks;
 * returns the previous setting. */
int pf_threads_by_work(int on);

#endif
