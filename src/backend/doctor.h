/* Internal to src/backend: cae doctor's checks (cae/doctor.h). doctor.c builds the report;
 * each backend's checks are in a file of their own (doctor-local.c, doctor-docker.c,
 * doctor-kubernetes.c), and each appends {name, ok, detail, fix, required} to checks. */
#ifndef CAE_BACKEND_DOCTOR_H
#define CAE_BACKEND_DOCTOR_H

#include "base/macro.h"
#include "cae/config.h"

#include <jansson.h>
#include <stdbool.h>

/* Appends one check; fix is ignored when ok (null in the report). */
void cae__doctor_add(json_t *checks, const char *name, bool ok, bool required, const char *fix,
		     const char *detail_fmt, ...) _printf_(6, 7);
/* The state directory: exists and writable, or can be made. */
void cae__doctor_state_dir(const cae_config *cfg, json_t *checks, bool required);
/* How to get the image of environment name: `cae images build NAME` for cae's own images
 * (coding-agent-executor-NAME:latest), else a pull. Writes into buf, returns it. */
const char *cae__doctor_image_fix(const char *name, const char *image, char *buf, size_t size);

void cae__doctor_local(const cae_config *cfg, json_t *checks);
/* *reachable: whether the engine answered (backend auto picks docker then). */
void cae__doctor_docker(const cae_config *cfg, json_t *checks, bool *reachable);
void cae__doctor_kubernetes(const cae_config *cfg, json_t *checks);

#endif
