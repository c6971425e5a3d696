// Loaded first by ./node (a grading command's node, and its workers'): node's CommonJS loader
// made its global folders from HOME ($HOME/.node_modules, $HOME/.node_libraries: the graded
// code's) before this runs; they are made again without HOME, which is then put back.
"use strict";
const home = process.env.HOME;
delete process.env.HOME;
require("module")._initPaths();
if (home !== undefined) process.env.HOME = home;
