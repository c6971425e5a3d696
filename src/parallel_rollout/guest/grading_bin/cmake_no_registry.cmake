# Loaded by ./cmake (its -C) before the check's words as it configures a project: find_package()
# searches no user package registry, ~/.cmake/packages, the graded code's. A check's own -D wins.
set(CMAKE_FIND_USE_PACKAGE_REGISTRY OFF CACHE BOOL "no ~/.cmake/packages in a grading command" FORCE)
