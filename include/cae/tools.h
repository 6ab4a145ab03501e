/* Tool definitions for agents: the functions form, the OpenAI `tools` form and the MCP
 * `tools/list` form of every tool that is enabled by the configuration. They are made from
 * the one tool table (src/tools/table.c) that also drives dispatch, in its order. */
#ifndef CAE_TOOLS_H
#define CAE_TOOLS_H

#include "cae/export.h"

#include <jansson.h>
#include <stdbool.h>

#include "cae/config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cae_tools_format {
	CAE_TOOLS_FUNCTIONS = 0, /* [{name, description, parameters}] */
	CAE_TOOLS_OPENAI, /* [{type: "function", function: {name, description, parameters}}] */
	CAE_TOOLS_MCP,	  /* [{name, description, inputSchema, outputSchema?}] */
} cae_tools_format;

typedef struct cae_tools_options {
	cae_tools_format format;
	bool split_editor;	/* text_editor_<command> functions instead of one text_editor */
	bool environment_tools; /* environment_list / _prepare / _cleanup (the MCP server's) */
	bool output_schema;	/* MCP: include outputSchema */
	bool patch_tool;	/* apply_patch */
	/* process_start / _read / _write / _wait / _kill / _list: for a caller that keeps one
	 * cae_session for the whole task (the sessions live in it), as the MCP server does */
	bool process_tools;
} cae_tools_options;

/* Every enabled tool in the requested form (new reference): command-executor_execute_command
 * and exec_command when command_executor.enabled, the text editor when
 * text_editor_mcp.enabled, apply_patch when asked and worker.enabled, the environment tools
 * when asked, the process tools when asked and command_executor.sessions.max_per_environment
 * is not 0. */
CAE_EXPORT json_t *cae_tools_definitions(const cae_config *cfg, const cae_tools_options *opts);

/* command-executor_execute_command in the functions form; [] when the command executor is
 * disabled. New reference. */
CAE_EXPORT json_t *cae_tools_command_executor_functions(const cae_config *cfg);
/* The text editor (one tool, or split) in the functions form; [] when the text editor is
 * disabled. New reference. */
CAE_EXPORT json_t *cae_tools_text_editor_functions(const cae_config *cfg, bool split);
/* Wraps a functions-form array in the OpenAI tools form. tools is borrowed; new reference. */
CAE_EXPORT json_t *cae_tools_to_openai(json_t *functions);

/* When the text editor is enabled, the GitHub/GitLab file tools are removed from a tool list
 * offered to the model (two tools that write the same files would compete). tools is a
 * JSON array in any of the forms above (borrowed); returns a new array. */
CAE_EXPORT json_t *cae_tools_filter_platform_tools(const cae_config *cfg, json_t *tools);
/* True for a tool of the GitHub or GitLab MCP servers that the text editor replaces: any
 * name a client qualified with the server's name ("github_…", "gitlab-…", "mcp__github__…",
 * "github.…", "github/…"), and the servers' own unprefixed file tools ("create_or_update_file",
 * "get_file_contents", "push_files", "delete_file", "get_file_blame", "get_repository_tree",
 * "compare_file_contents"). */
CAE_EXPORT bool cae_tools_is_platform_file_tool(const char *name);

#ifdef __cplusplus
}
#endif
#endif
