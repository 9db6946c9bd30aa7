"""Loads libsampan and declares the C API's prototypes (engine/capi/sampan.h) for ctypes.

The library is found, in order, at $SAMPAN_LIBRARY, next to this package (libsampan.so in the
package directory or its parent), or through the system's library search path.
"""

import ctypes
import ctypes.util
import os

H = ctypes.c_void_p  # every handle is opaque
STATUS = ctypes.c_int32

OK = 0
INVALID_ARGUMENT = 1
NOT_FOUND = 2
INVALID_MODEL = 3
UNSUPPORTED = 4
OUT_OF_MEMORY = 5
IO = 6
INTERNAL = 7
RESOURCE_EXHAUSTED = 8
UNAVAILABLE = 9
CANCELLED = 10
DEADLINE_EXCEEDED = 11
INVALID_HANDLE = 12
TIMEOUT = 13
END_OF_STREAM = 14

DTYPE_UNDEFINED = 0
DTYPE_F32 = 1
DTYPE_I32 = 2
DTYPE_I64 = 3
DTYPE_BOOL = 4
DTYPE_U8 = 5

FINISH_NAMES = {0: None, 1: "stop", 2: "length", 3: "cancelled", 4: "timeout", 5: "error"}

EVENT_CALLBACK = ctypes.CFUNCTYPE(None, H, H, ctypes.c_void_p)

_P = ctypes.POINTER
_c = ctypes
_PROTOTYPES = {
    "sampan_version": (_c.c_char_p, []),
    "sampan_abi_version": (_c.c_int32, []),
    "sampan_status_name": (_c.c_char_p, [STATUS]),
    "sampan_last_error": (_c.c_char_p, []),
    # config
    "sampan_config_create": (STATUS, [_P(H)]),
    "sampan_config_destroy": (STATUS, [H]),
    "sampan_config_set_model_dir": (STATUS, [H, _c.c_char_p]),
    "sampan_config_set_model": (STATUS, [H, _c.c_char_p, _c.c_char_p]),
    "sampan_config_set_params_file": (STATUS, [H, _c.c_char_p]),
    "sampan_config_set_device": (STATUS, [H, _c.c_char_p]),
    "sampan_config_set_threads": (STATUS, [H, _c.c_int32]),
    "sampan_config_set_precision": (STATUS, [H, _c.c_char_p]),
    "sampan_config_set_int4_group_size": (STATUS, [H, _c.c_int32]),
    "sampan_config_set_kv_cache_dtype": (STATUS, [H, _c.c_char_p]),
    "sampan_config_set_max_model_len": (STATUS, [H, _c.c_int64]),
    "sampan_config_set_kv_cache_bytes": (STATUS, [H, _c.c_int64]),
    "sampan_config_set_max_batch_size": (STATUS, [H, _c.c_int32]),
    "sampan_config_get_model_dir": (STATUS, [H, _P(_c.c_char_p)]),
    "sampan_config_get_params_file": (STATUS, [H, _P(_c.c_char_p)]),
    "sampan_config_get_device": (STATUS, [H, _P(_c.c_char_p)]),
    "sampan_config_get_threads": (STATUS, [H, _P(_c.c_int32)]),
    "sampan_config_get_precision": (STATUS, [H, _P(_c.c_char_p)]),
    "sampan_config_get_int4_group_size": (STATUS, [H, _P(_c.c_int32)]),
    "sampan_config_get_kv_cache_dtype": (STATUS, [H, _P(_c.c_char_p)]),
    "sampan_config_get_max_model_len": (STATUS, [H, _P(_c.c_int64)]),
    "sampan_config_get_kv_cache_bytes": (STATUS, [H, _P(_c.c_int64)]),
    "sampan_config_get_max_batch_size": (STATUS, [H, _P(_c.c_int32)]),
    "sampan_config_add_lora": (STATUS, [H, _c.c_char_p, _c.c_char_p]),
    "sampan_config_clear_loras": (STATUS, [H]),
    "sampan_config_get_lora_count": (STATUS, [H, _P(_c.c_int32)]),
    "sampan_config_get_lora": (STATUS, [H, _c.c_int32, _P(_c.c_char_p), _P(_c.c_char_p)]),
    # predictor and tensor
    "sampan_predictor_create": (STATUS, [H, _P(H)]),
    "sampan_predictor_clone": (STATUS, [H, _P(H)]),
    "sampan_predictor_destroy": (STATUS, [H]),
    "sampan_predictor_get_input_num": (STATUS, [H, _P(_c.c_int32)]),
    "sampan_predictor_get_output_num": (STATUS, [H, _P(_c.c_int32)]),
    "sampan_predictor_get_input_name": (STATUS, [H, _c.c_int32, _P(_c.c_char_p)]),
    "sampan_predictor_get_output_name": (STATUS, [H, _c.c_int32, _P(_c.c_char_p)]),
    "sampan_predictor_get_input_handle": (STATUS, [H, _c.c_char_p, _P(H)]),
    "sampan_predictor_get_output_handle": (STATUS, [H, _c.c_char_p, _P(H)]),
    "sampan_predictor_run": (STATUS, [H]),
    "sampan_tensor_reshape": (STATUS, [H, _P(_c.c_int64), _c.c_int32]),
    "sampan_tensor_copy_from_cpu": (STATUS, [H, _c.c_int32, _c.c_void_p, _c.c_uint64]),
    "sampan_tensor_copy_to_cpu": (STATUS, [H, _c.c_int32, _c.c_void_p, _c.c_uint64]),
    "sampan_tensor_get_shape": (STATUS, [H, _P(_c.c_int64), _c.c_int32, _P(_c.c_int32)]),
    "sampan_tensor_get_dtype": (STATUS, [H, _P(_c.c_int32)]),
    "sampan_tensor_get_name": (STATUS, [H, _P(_c.c_char_p)]),
    "sampan_tensor_get_model_shape": (STATUS, [H, _P(_c.c_int64), _c.c_int32, _P(_c.c_int32)]),
    "sampan_tensor_get_dim_name": (STATUS, [H, _c.c_int32, _P(_c.c_char_p)]),
    "sampan_tensor_get_model_dtype": (STATUS, [H, _P(_c.c_int32)]),
    # engine
    "sampan_engine_create": (STATUS, [H, _P(H)]),
    "sampan_engine_destroy": (STATUS, [H]),
    "sampan_engine_get_vocab_size": (STATUS, [H, _P(_c.c_int64)]),
    "sampan_engine_get_max_model_len": (STATUS, [H, _P(_c.c_int64)]),
    "sampan_engine_tokenize": (STATUS, [H, _c.c_char_p, _c.c_int32, _P(_c.c_int32), _c.c_int64,
                                        _P(_c.c_int64)]),
    "sampan_params_create": (STATUS, [_P(H)]),
    "sampan_params_destroy": (STATUS, [H]),
    "sampan_params_set_temperature": (STATUS, [H, _c.c_float]),
    "sampan_params_set_top_k": (STATUS, [H, _c.c_int32]),
    "sampan_params_set_top_p": (STATUS, [H, _c.c_float]),
    "sampan_params_add_logit_bias": (STATUS, [H, _c.c_int32, _c.c_float]),
    "sampan_params_clear_logit_bias": (STATUS, [H]),
    "sampan_params_set_json_object": (STATUS, [H, _c.c_int32]),
    "sampan_params_set_json_schema": (STATUS, [H, _c.c_char_p]),
    "sampan_params_set_seed": (STATUS, [H, _c.c_uint64]),
    "sampan_params_set_max_tokens": (STATUS, [H, _c.c_int64]),
    "sampan_params_add_stop": (STATUS, [H, _c.c_char_p]),
    "sampan_params_clear_stops": (STATUS, [H]),
    "sampan_params_set_ignore_eos": (STATUS, [H, _c.c_int32]),
    "sampan_params_set_lora": (STATUS, [H, _c.c_char_p]),
    "sampan_params_set_prompt_logprobs": (STATUS, [H, _c.c_int32]),
    "sampan_engine_submit_text": (STATUS, [H, _c.c_char_p, H, EVENT_CALLBACK, _c.c_void_p,
                                           _P(H)]),
    "sampan_engine_submit_tokens": (STATUS, [H, _P(_c.c_int32), _c.c_int64, H, EVENT_CALLBACK,
                                             _c.c_void_p, _P(H)]),
    "sampan_request_cancel": (STATUS, [H]),
    "sampan_request_poll": (STATUS, [H, _c.c_int32, _P(H)]),
    "sampan_request_wait": (STATUS, [H, _c.c_int32]),
    "sampan_request_destroy": (STATUS, [H]),
    "sampan_event_get_token": (STATUS, [H, _P(_c.c_int32)]),
    "sampan_event_get_text": (STATUS, [H, _P(_c.c_void_p), _P(_c.c_uint64)]),
    "sampan_event_get_logprob": (STATUS, [H, _P(_c.c_float)]),
    "sampan_event_get_prompt_logprobs": (STATUS, [H, _P(_P(_c.c_float)), _P(_c.c_int64)]),
    "sampan_event_is_finished": (STATUS, [H, _P(_c.c_int32)]),
    "sampan_event_get_finish_reason": (STATUS, [H, _P(_c.c_int32)]),
    "sampan_event_get_finish_name": (STATUS, [H, _P(_c.c_char_p)]),
    "sampan_event_get_usage": (STATUS, [H, _P(_c.c_int64), _P(_c.c_int64), _P(_c.c_int64)]),
    "sampan_event_get_error": (STATUS, [H, _P(_c.c_char_p)]),
}


def _candidates():
    env = os.environ.get("SAMPAN_LIBRARY")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (here, os.path.dirname(here)):
        yield os.path.join(d, "libsampan.so")
    found = ctypes.util.find_library("sampan")
    if found:
        yield found


def load_library():
    tried = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(f"{path} (missing)")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({e})")
            continue
        for name, (restype, argtypes) in _PROTOTYPES.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        return lib
    raise OSError("libsampan not found; set SAMPAN_LIBRARY to its path. Tried: " +
                  "; ".join(tried or ["nothing"]))
