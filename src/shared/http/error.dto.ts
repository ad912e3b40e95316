/** The one JSON error shape of every non-2xx response. */
export class FieldErrorDto {
  /** Request field (dotted path for nested bodies), e.g. `boot.menu_timeout`. */
  field!: string;
  message!: string;
}

export class ErrorDto {
  /** HTTP status code, repeated in the body. */
  statusCode!: number;
  /** HTTP reason phrase, e.g. `Bad Request`. */
  error!: string;
  /** What went wrong, naming the field or the object involved. */
  message!: string;
  /** Per-field validation failures (400 only). */
  errors?: FieldErrorDto[];
  /** Correlates a 500 with the server log line that holds the stack. */
  error_id?: string;
}
