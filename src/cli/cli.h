/* Internal to the CLI: the subcommand table. Each subcommand lives in its own file,
 * takes argv with argv[0] = its own name, and returns the process exit status. */
#ifndef CAE_CLI_H
#define CAE_CLI_H

struct cae_cli_command {
	const char *name;
	const char *summary;
	int (*run)(int argc, char **argv);
};

int cae_cli_version(int argc, char **argv);

#endif
