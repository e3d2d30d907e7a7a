/*
 * A pre-scan of YAML text for how deeply its flow collections nest. libyaml
 * takes time quadratic in the nesting depth (20,000 levels of "[" take
 * seconds, 100,000 hang), so a config nested deeper than any real one is
 * refused, with its place, before libyaml sees it.
 *
 * The scan counts "[" and "{" outside quoted scalars, comments and block
 * scalars ("|" and ">", where kernel sources with their own brackets live).
 */
#ifndef SCHEDRUN_YAML_DEPTH_H
#define SCHEDRUN_YAML_DEPTH_H

#include <stdbool.h>
#include <stddef.h>
#include <yaml.h>

#include "schedrun.h"

#define PROG_MAX_YAML_DEPTH 64

/* 0 when no flow collection nests deeper than max_depth; else -1, with the
 * 1-based line and column of the bracket that went too deep. */
int prog_yaml_depth_check(const char *text, size_t len, int max_depth, size_t *line, size_t *col);

/* Parses text into doc, after the depth check: false with err set to
 * "path:line:column: what is wrong" (SCHEDRUN_ECONFIG), where a tab that
 * libyaml stopped at is named as such: YAML indents with spaces. */
bool prog_yaml_parse(const char *path, const char *text, size_t len, yaml_document_t *doc, schedrun_error_t *err);

#endif
