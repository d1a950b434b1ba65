# Builds and runs the consumer project twice: against an installed dcomm (find_package) and
# with dcomm's source tree added as a subdirectory.
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK}/dcomm -DDCOMM_BUILD_TESTS=OFF
                        -DDCOMM_BUILD_BENCH=OFF -DDCOMM_BUILD_EXAMPLES=OFF -DDCOMM_BUILD_NCCL=OFF -DDCOMM_BUILD_TORCH=OFF -DCMAKE_INSTALL_PREFIX=${WORK}/prefix
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring dcomm failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --install ${WORK}/dcomm RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "installing dcomm failed")
endif()
foreach(mode find_package add_subdirectory)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE}/tests/package -B ${WORK}/${mode} -DMODE=${mode}
                          -DDCOMM_SOURCE=${SOURCE} -DCMAKE_PREFIX_PATH=${WORK}/prefix RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "configuring the consumer (${mode}) failed")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK}/${mode} RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "building the consumer (${mode}) failed")
  endif()
  execute_process(COMMAND ${WORK}/${mode}/consumer RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "the consumer (${mode}) failed: ${rc}")
  endif()
endforeach()
