/* cae images build: builds the language images (docker/) with scripts/build-images.sh, which
 * works on machines without a container registry (debootstrap base + Debian toolchains). */
#include "cli/cli.h"

#include "base/fs.h"
#include "base/macro.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/banned.h"

static int usage_images(FILE *f)
{
	fprintf(f,
		"usage: cae images build [--rebuild] [--base-only] [--official] [NAME...]\n\n"
		"Builds coding-agent-executor-<NAME>:latest (python, node, java, go; miniforge "
		"needs --official) with scripts/build-images.sh from the cae source tree "
		"(CAE_SOURCE_DIR, default: where cae was built from). Without a registry the base "
		"is a debootstrapped Debian; with --official the Dockerfiles' official bases.\n");
	return f == stdout ? 0 : 2;
}

int cae_cli_images(int argc, char **argv)
{
	if (argc < 2)
		return usage_images(stderr);
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
		return usage_images(stdout);
	if (strcmp(argv[1], "build") != 0)
		return usage_images(stderr);
	const char *src = getenv("CAE_SOURCE_DIR");
	if (!src || !*src)
		src = CAE_SOURCE_DIR;
	_cleanup_free_ char *script = cae__path_join(src, "scripts/build-images.sh");
	if (!script || access(script, X_OK) < 0) {
		fprintf(stderr,
			"cae: images: %s not found (set CAE_SOURCE_DIR to the cae source tree)\n",
			script ? script : "build-images.sh");
		return 1;
	}
	char **args = calloc((size_t)argc + 1, sizeof(char *));
	if (!args)
		return 1;
	args[0] = script;
	for (int i = 2; i < argc; i++)
		args[i - 1] = argv[i];
	fflush(stdout);
	execv(script, args);
	fprintf(stderr, "cae: images: cannot run %s: %s\n", script, strerror(errno));
	free(args);
	return 1;
}
