/* cae doctor: what works on this host, per backend (local, docker, kubernetes), and what to
 * do about the rest.
 *
 * The report is JSON of a stable shape:
 *   {"default_backend": "local",       the backend commands get (auto resolved as
 *                                      cae_backend_new resolves it)
 *    "configured_backend": "auto",     command_executor.backend (or the caller's override)
 *    "ok": true,                       the default backend works
 *    "backends": {"local": {"ok": true, "checks": [CHECK, ...]}, "docker": {...},
 *                 "kubernetes": {...}}}
 * with each CHECK {"name", "ok", "detail", "fix", "required"}: name a short stable text
 * ("bubblewrap", "image python", ...), detail what was found, fix what to do (null when ok),
 * required whether the backend works without it (a backend is ok when its required checks
 * are; a failed check that is not required weakens a bound, and the environments' warnings
 * say so).
 *
 * The checks only look: they make nothing but what the backends make on first use (the
 * local backend's state directory and the sandbox's /etc files, a cgroup made and removed at
 * once), and send only GET requests to the engine and the cluster. */
#ifndef CAE_DOCTOR_H
#define CAE_DOCTOR_H

#include "cae/export.h"

#include <jansson.h>

#ifdef __cplusplus
extern "C" {
#endif

struct cae_config;

/* Runs every check with cfg (borrowed). backend: the default backend to judge ("auto",
 * "local", "docker", "kubernetes"; NULL: cfg's command_executor.backend). Returns the new
 * report, NULL on ENOMEM. */
CAE_EXPORT json_t *cae_doctor_run(const struct cae_config *cfg, const char *backend);

#ifdef __cplusplus
}
#endif
#endif
