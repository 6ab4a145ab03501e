/* Internal to src/helper: `cae-helper --enter`, the host-side first step of a local sandbox
 * (cgroups, rlimits, staged bind sources, the switch to the sandbox uid; see enter.c). */
#ifndef CAE_HELPER_ENTER_H
#define CAE_HELPER_ENTER_H

/* The descriptor on which --enter hands PROGRAM (bwrap) the --seccomp FILE: PROGRAM's
 * command line names it (`bwrap --seccomp 3`). --enter is started with only 0, 1 and 2 open. */
#define CAE_HELPER_ENTER_SECCOMP_FD 3

/* argv[1] is "--enter". Execs the program after "--"; returns an exit status on failure. */
int cae__helper_enter_main(int argc, char **argv);

#endif
