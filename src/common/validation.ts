import { BadRequestException, ValidationError, ValidationPipe } from '@nestjs/common';

function flatten(errors: ValidationError[], prefix = ''): { field: string; message: string }[] {
  const out: { field: string; message: string }[] = [];
  for (const e of errors) {
    const field = prefix ? `${prefix}.${e.property}` : e.property;
    if (e.constraints) {
      // whitelist violations come as "property x should not exist": say it plainly.
      const msgs = Object.entries(e.constraints).map(([k, m]) =>
        k === 'whitelistValidation' ? `unknown field ${field}` : m,
      );
      out.push({ field, message: msgs[0] });
    }
    if (e.children?.length) out.push(...flatten(e.children, field));
  }
  return out;
}

/** Global pipe: unknown fields rejected, messages name the (dotted) field. */
export function createValidationPipe(): ValidationPipe {
  return new ValidationPipe({
    whitelist: true,
    forbidNonWhitelisted: true,
    transform: true,
    transformOptions: { enableImplicitConversion: false },
    validationError: { target: false, value: false },
    exceptionFactory: (errors) => {
      const list = flatten(errors);
      return new BadRequestException({
        message: list.map((e) => `${e.field}: ${e.message}`).join('; ') || 'invalid request',
        errors: list,
      });
    },
  });
}
