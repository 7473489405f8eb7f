/*
 * devcheck.h - the worker's device self-check (jobworker --self-check).
 *
 * Runs each op of the kernel interface on seeded random inputs on the chosen
 * device and compares it with an independent double-precision computation
 * (CPU) or with the CPU reference op (CUDA), printing one line per op with
 * the error, the tolerance, and the time. It is what an operator runs first
 * on a new machine, and what the device benchmark script calls.
 */
#ifndef WORKER_DEVCHECK_H
#define WORKER_DEVCHECK_H

#include <stdio.h>

#include "kernels/kn.h"

/* Returns 0 when every op is within tolerance, ERR_CORRUPT when one is not,
 * ERR_NODEVICE / ERR_UNSUPPORTED when the device cannot be used (CUDA not
 * built or no GPU), ERR_NOMEM. Output lines go to out. */
int devcheck_run(enum kn_device dev, FILE *out);

#endif
