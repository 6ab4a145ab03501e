/* What cae knows of its language images (docker/): the tools each environment's image has,
 * which the command-executor prompt lists, and what a prepare says when an environment's
 * image is missing (which image, and how to get it where it is needed). */
#ifndef CAE_BACKEND_IMAGES_H
#define CAE_BACKEND_IMAGES_H

#include <stdbool.h>
#include <stddef.h>

#include "cae/error.h"

/* The programs of environment's image (python, node, java, go, miniforge): its toolchain
 * first, then the common set of every image (docker/common-packages: make, gcc, g++, git,
 * ...). A NULL-terminated static list; NULL when the environment is none of cae's images (a
 * custom one). */
const char *const *cae__image_tools(const char *environment);

/* NAME when image is cae's language image coding-agent-executor-NAME[:tag] of a NAME
 * `cae images build` builds (python, node, java, go, miniforge), written to name (size
 * bytes); false otherwise. */
bool cae__image_cae_name(const char *image, char *name, size_t size);

/* err (the engine's refusal to create a container from image, e.g. "No such image") said
 * again as what to do: the image, the environment, and `cae images build NAME` for cae's
 * images (docker pull or load for others). Returns -ENOENT. */
int cae__image_missing_docker(const char *image, const char *environment, cae_error *err);

/* A pod that cannot start because a node has not got its image: reason is the kubelet's
 * (ErrImageNeverPull, ErrImagePull, ImagePullBackOff, InvalidImageName), policy the
 * container's imagePullPolicy, detail the kubelet's message (NULL: none). Sets err to name
 * the image, the pull policy and how to get the image to the nodes; returns -ENOENT. */
int cae__image_missing_kubernetes(const char *reason, const char *image, const char *policy,
				  const char *detail, cae_error *err);

/* Warnings true of every prepare on one engine (the storage driver that takes no size
 * option, the engine's own warnings about its host) are said once per engine per process:
 * true the first time (engine, text) is seen by this process, false after. engine names
 * it (its DOCKER_HOST, ...). */
bool cae__engine_warning_first(const char *engine, const char *text);

#endif
